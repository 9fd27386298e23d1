"""bench/tcp_paths.py's consumer row alone (sync send() with a PushConsumer process taking the
messages), on a fresh broker per round, from the tree in the current directory (so an older
tree can be A/B'd with the same script). Prints the row per round.

    .venv/bin/python bench/tcp_consumer_row.py WORKERS ROUNDS DURATION_S    # e.g. 1 1 3 (WORKERS 0: the broker's default, as tcp_paths)"""
import os, sys, tempfile, shutil
from pathlib import Path
sys.path.insert(0, os.path.join(os.getcwd(), "bench")); sys.path.insert(0, os.getcwd())
import tcp_paths as tp
import vs_rocketmq
from shmq import Producer
workers, rounds, dur = int(sys.argv[1]) or None, int(sys.argv[2]), float(sys.argv[3])  # 0: the broker's default
work = Path(tempfile.mkdtemp(prefix="tcpcons5-row-"))
try:
    for rnd in range(rounds):
        pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", work / f"r{rnd}", workers)
        try:
            p = Producer("tcp-paths-pg", namesrv=pair.namesrv, local="never"); p.start()
            tp.create_topic(pair.addr, pair.namesrv, f"Warm{rnd}", 4)
            tp.sync_sends(p, f"Warm{rnd}", 0.5)
            tp.consumer_row(pair, p, f"Live{rnd}", 4, dur, lambda name, rate, note="": print(f"{os.getcwd()} {rate:,.0f}/s {note}", flush=True))
            p.shutdown()
        finally:
            pair.stop()
finally:
    shutil.rmtree(work, ignore_errors=True)
