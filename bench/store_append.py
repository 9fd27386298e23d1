"""Store append throughput: puts/s of the C append called from Python, on disk.

    .venv/bin/python bench/store_append.py [--seconds 2] [--repeat 5] [--dir DIR]

The owner store is opened here (as the broker's supervisor would) on a temporary directory;
the puts come from separate attached processes (as local producers would), so the owner's
flush, prealloc and index threads do not share their GIL. Each scenario runs --repeat times
and the median is reported, beside a peer measured in the same run: the same bytes appended
with Python's buffered file write (no lock, no queue index, no CRC) as a floor to compare
the whole store path against.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import json, sys, threading, time
from shmq.store import MessageStore
from shmq.message.batch import encode_batch
root, size, batch, seconds, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
qbase = int(sys.argv[6])
s = MessageStore.attach(root)
body = b"x" * size
start_evt = threading.Event()
counts = [0] * threads
def run(k):
    w = s.queue_writer("Bench", qbase + k)
    b = encode_batch([(body, b"", 0)] * batch) if batch > 1 else None
    start_evt.wait()
    n = 0
    end = time.perf_counter() + seconds
    if batch < 0:  # SYNC_FLUSH pipelined: -batch puts in flight, then one wait for all
        put, wait, window = w.put_nowait, w.wait_flushed, -batch
        while time.perf_counter() < end:
            for _ in range(window):
                last = put(body)
            wait(last)
            n += window
    elif b is None:
        put = w.put
        while time.perf_counter() < end:
            for _ in range(256):
                put(body)
            n += 256
    else:
        pb = w.put_batch
        while time.perf_counter() < end:
            for _ in range(16):
                pb(b)
            n += 16 * batch
    counts[k] = n
ts = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
for t in ts: t.start()
sys.stdout.write("ready\n"); sys.stdout.flush()
sys.stdin.readline()
t0 = time.perf_counter(); start_evt.set()
for t in ts: t.join()
dt = time.perf_counter() - t0
print(json.dumps({"count": sum(counts), "seconds": dt}))
s.close()
"""

PEER = r"""
import json, sys, time, struct
path, size, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rec = struct.pack(">i", size) + b"x" * size
n = 0
with open(path, "ab") as f:
    w = f.write
    end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < end:
        for _ in range(256):
            w(rec)
        n += 256
    dt = time.perf_counter() - t0
print(json.dumps({"count": n, "seconds": dt}))
"""


def run_children(root, procs, size, batch, seconds, threads=1):
    ps = [subprocess.Popen([sys.executable, "-c", CHILD, root, str(size), str(batch), str(seconds),
                            str(threads), str(k * threads)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True) for k in range(procs)]
    for p in ps:
        assert p.stdout.readline().strip() == "ready"
    for p in ps:  # start together
        p.stdin.write("go\n")
        p.stdin.flush()
    total = 0
    longest = 0.0
    for p in ps:
        out = json.loads(p.stdout.readline())
        p.wait()
        total += out["count"]
        longest = max(longest, out["seconds"])
    return total / longest


def run_peer(tmp, size, seconds):
    path = os.path.join(tmp, "peer.log")
    out = json.loads(subprocess.run([sys.executable, "-c", PEER, path, str(size), str(seconds)],
                                    capture_output=True, text=True, check=True).stdout)
    os.unlink(path)
    return out["count"] / out["seconds"]


def machine() -> str:
    from shmq.bench.runner import machine as describe  # the harness's description of the machine
    m = describe()
    return f"{m['nproc']} cores, {m['cpu']}, {m['system']}, Python {m['python']}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", default=None, help="where the temporary store goes (default: system temp)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    from shmq.store import SYNC_FLUSH, MessageStore, StoreConfig

    scenarios = [
        # name, processes, threads per process, body size, batch, flush mode
        ("single put, 100 B, 1 process", 1, 1, 100, 1, 0),
        ("single put, 1 KiB, 1 process", 1, 1, 1024, 1, 0),
        ("batch of 64, 100 B, 1 process", 1, 1, 100, 64, 0),
        ("batch of 64, 1 KiB, 1 process", 1, 1, 1024, 64, 0),
        ("single put, 100 B, 2 processes", 2, 1, 100, 1, 0),
        ("batch of 64, 100 B, 2 processes", 2, 1, 100, 64, 0),
        ("SYNC_FLUSH put, 1 KiB, 4 procs x 16 threads (64 in flight)", 4, 16, 1024, 1, SYNC_FLUSH),
        ("SYNC_FLUSH put, 1 KiB, 1 proc pipelined 64 (64 in flight)", 1, 1, 1024, -64, SYNC_FLUSH),
        ("SYNC_FLUSH put, 1 KiB, 2 procs pipelined 64 (128 in flight)", 2, 1, 1024, -64, SYNC_FLUSH),
        ("SYNC_FLUSH put, 1 KiB, 4 procs pipelined 64 (256 in flight)", 4, 1, 1024, -64, SYNC_FLUSH),
    ]
    results = []
    print(f"# {machine()}\n# {args.repeat} runs of {args.seconds}s each, median (min-max)")
    for name, procs, threads, size, batch, mode in scenarios:
        rates, flushes = [], []
        for _ in range(args.repeat):
            tmp = tempfile.mkdtemp(prefix="shmq-bench-", dir=args.dir)
            cfg = StoreConfig(root=os.path.join(tmp, "store"), mapped_file_size_commitlog=1 << 30,
                              flush_disk_type=mode, message_index_enable=False)
            store = MessageStore.open(cfg)
            try:
                while len(store._prefaulted) < 2:  # let the flush thread pre-touch the files
                    time.sleep(0.05)
                before = store.cb.ctl.pos.flush_count
                rates.append(run_children(cfg.root, procs, size, batch, args.seconds, threads))
                flushes.append(store.cb.ctl.pos.flush_count - before)
            finally:
                store.close()
                shutil.rmtree(tmp, ignore_errors=True)
        peer = statistics.median(run_peer(tempfile.gettempdir(), size, args.seconds) for _ in range(3)) if procs == 1 and batch == 1 and not mode else None
        med = statistics.median(rates)
        row = {"scenario": name, "msgs_per_s": med, "min": min(rates), "max": max(rates),
               "MB_per_s": med * size / 1e6}
        line = f"{name:<68} {med:>12,.0f} msg/s  ({min(rates):,.0f}-{max(rates):,.0f})  {row['MB_per_s']:,.0f} MB/s"
        if mode:
            row["msyncs_per_s"] = statistics.median(flushes) / args.seconds
            line += f"  {row['msyncs_per_s']:,.0f} msync/s"
        if peer:
            row["peer_buffered_file_write"] = peer
            line += f"  | peer f.write {peer:,.0f}/s, ratio {med / peer:.2f}"
        print(line, flush=True)
        results.append(row)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"machine": machine(), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
