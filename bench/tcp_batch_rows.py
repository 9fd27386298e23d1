#!/usr/bin/env python3
"""bench/tcp_paths.py's two batch rows only, with CPU per batch of each process: a short A/B
harness for the worker's batch path (its own functions, from the tree on PYTHONPATH).

    PYTHONPATH=<tree> .venv/bin/python bench/tcp_batch_rows.py [seconds per row, 3]

One shmq NameServer + broker (ASYNC_FLUSH, 2 workers) as tcp_paths.py starts them, one topic of 4
queues, one Producer(local="never") warmed for 0.5 s, then ``send_batch`` of 32 x 100 B (one in
flight) and ``send_batch_async`` of 32 (16 in flight): msgs/s and CPU seconds per batch of the
producer (this process), the supervisor and the workers. Every process is stopped by pid; the
store is a temp dir that is removed.
"""
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

tree = Path(os.environ.get("PYTHONPATH") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(tree))
sys.path.insert(0, str(tree / "bench"))

import tcp_paths as T  # noqa: E402
import vs_rocketmq  # noqa: E402
from shmq import Producer  # noqa: E402
from shmq.bench.peers.shmq_client import create_topic  # noqa: E402


def main() -> None:
    dur = float(sys.argv[1]) if len(sys.argv) > 1 else 3
    work = Path(tempfile.mkdtemp(prefix="tcp-batch-rows-"))
    pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", work / "r", 2)
    try:
        topic = "BatchRows"
        create_topic(pair.addr, pair.namesrv, topic, 4)
        p = Producer("rows-pg", namesrv=pair.namesrv, local="never")
        p.start()
        T.batch_sends(p, topic, 0.5)  # routes, and the worker's first batch (its C path learns)
        for name, fn in (("send_batch() of 32", T.batch_sends),
                         ("send_batch_async() of 32, 16 in flight", T.batch_async_sends)):
            cpu = T.CpuMeter(pair)
            t0 = time.perf_counter()
            rate = fn(p, topic, dur)
            batches = rate * (time.perf_counter() - t0) / 32
            t1 = cpu._now()
            per = ", ".join(f"{k} {(t1[k] - cpu.t0[k]) / batches * 1e6:.0f} us" for k in t1)
            print(f"{name}: {rate:,.0f} msgs/s; CPU/batch {per}", flush=True)
        p.shutdown()
    finally:
        pair.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
