#!/usr/bin/env python3
"""What one pass over every queue costs the supervisor's services, with many queues.

    .venv/bin/python bench/queue_pass.py [--queues 10000] [--passes 20]
    # another tree: cd <tree> && PYTHONPATH=<tree> <this tree>/.venv/bin/python <this tree>/bench/queue_pass.py

A store of its own (temp dir, no broker, services not started) with ``--queues`` queues of one
100 B message each (1,250 topics of 8). Timed, each the median of ``--passes``:
``ControlBlock.iter_queue_slots`` walked whole; the flush thread's ConsumeQueue round with
nothing new (``FlushService.flush_queues_and_checkpoint(flush_log=False)``: the walk and the
checkpoint compare); the metrics tail's pass (``QueueTail.pass_once``) with nothing new, and
with one new message in every queue. Wall clock in one process: run it under the bench lock,
alternated with the other tree."""
from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time

from shmq.store.config import StoreConfig
from shmq.store.flush import FlushService
from shmq.store.message_store import MessageStore


def timed(fn, passes: int, before=None) -> float:
    out = []
    for _ in range(passes):
        if before is not None:
            before()
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--queues", type=int, default=10_000)
    ap.add_argument("--passes", type=int, default=20)
    a = ap.parse_args()
    root = tempfile.mkdtemp(prefix="shmq-queue-pass-")
    try:
        st = MessageStore.open(StoreConfig(root=root, mapped_file_size_commitlog=256 << 20), start_services=False)
        topics = [(f"Many{t}", q) for t in range((a.queues + 7) // 8) for q in range(8)][:a.queues]

        def one_each() -> None:
            for t, q in topics:
                st.put(t, q, b"x" * 100)

        one_each()
        flusher = FlushService(st)
        flusher.flush_queues_and_checkpoint(flush_log=False)
        from shmq.broker.supervisor.metrics.tail import QueueTail
        tail = QueueTail(st)
        tail.pass_once()
        walk = timed(lambda: sum(1 for _ in st.cb.iter_queue_slots()), a.passes)
        cq = timed(lambda: flusher.flush_queues_and_checkpoint(flush_log=False), a.passes)
        idle = timed(tail.pass_once, a.passes)
        busy = timed(tail.pass_once, max(3, a.passes // 4), before=one_each)
        print(f"{a.queues:,} queues ({sum(1 for _ in st.cb.iter_queue_slots()):,} slots used): "
              f"iter_queue_slots {walk:.2f} ms | flush's CQ round, nothing new {cq:.2f} ms | "
              f"metrics tail pass: nothing new {idle:.2f} ms, one new message a queue {busy:.2f} ms")
        st.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
