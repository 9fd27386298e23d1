#!/usr/bin/env python3
"""CPU per message of the local push consumer's pull thread draining a backlog: what the
consumer costs per message and per wake-up with no producer sharing the cores
(``shmq-bench produce`` measures the whole road).

    .venv/bin/python bench/local_drain_cpu.py [--n 100000] [--pull-batch 32] [--rounds 3]

A broker for the run (``shmq.bench.services.Env``, ASYNC_FLUSH), a backlog of ``n`` 100 B
messages on 4 queues (``send_batch`` of 64), then a ``PushConsumer(local="always",
consume_threads=0, consume_batch_size=32)`` as the bench's shmq row configures it, whose
listener does what the bench's does (the bodies out of the messages, each body's 8-byte stamp
unpacked). Printed: the pull thread's CPU (``time.thread_time`` from the first listener call to
the one that saw the n-th message) per message, median and minimum over the rounds (each round
a fresh group reading from the first offset). ``--pull-batch 1`` makes every wake-up one
message: its figure is the cost of a wake-up. ``--listener count`` gives the consumer a listener
that only counts the messages (no bodies taken out, no unpack): what is left is shmq's own part
of a wake-up, the wait, the read, the decode and the Python around the listener call.

Under ``valgrind --tool=callgrind --separate-threads=yes`` the pull thread's own file (the one
with ``hot_wait_read``) counts its instructions (``--rounds 1``).
"""
from __future__ import annotations

import argparse
import statistics
import struct
import threading
import time

from shmq import ConsumeResult, Message, Producer, PushConsumer
from shmq.bench.peers.shmq_client import create_topic
from shmq.bench.services import Env

STAMP = struct.Struct("<q")


def drain(ns: str, topic: str, group: str, n: int, pull_batch: int, bench_listener: bool = True) -> float:
    done, span, got = threading.Event(), [None, None], [0]
    success, unpack = ConsumeResult.SUCCESS, STAMP.unpack_from

    def listener(msgs):
        if span[0] is None:
            span[0] = time.thread_time()
        if bench_listener:
            for b in [m.body for m in msgs]:
                unpack(b)
        got[0] += len(msgs)
        if got[0] >= n and span[1] is None:
            span[1] = time.thread_time()
            done.set()
        return success

    c = PushConsumer(group, namesrv=ns, model="CLUSTERING", local="always", consume_from="FIRST_OFFSET",
                     consume_batch_size=32, pull_batch_size=pull_batch, rebalance_interval=1.0, consume_threads=0,
                     spin_s=50e-6, idle_wait_s=0.5)
    c.subscribe(topic, "*")
    c.on_message(listener)
    c.start()
    try:
        if not done.wait(300):
            raise RuntimeError(f"drained {got[0]} of {n} messages")
    finally:
        c.shutdown()
    return (span[1] - span[0]) / got[0] * 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--pull-batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--listener", choices=("bench", "count"), default="bench",
                    help="bench (default): the bench row's listener; count: one that only counts")
    a = ap.parse_args()
    env = Env()
    try:
        ns, broker = env.namesrv(), env.broker("ASYNC_FLUSH")
        topic = "DrainCpu"
        create_topic(broker, ns, topic, 4)
        p = Producer("drain-p", namesrv=ns, local="always")
        p.start()
        body = STAMP.pack(0) + b"x" * 92
        for _ in range(0, a.n, 64):
            p.send_batch([Message(topic, body) for _ in range(64)])
        p.shutdown()
        ns_per = [drain(ns, topic, f"drain-g{r}", a.n, a.pull_batch, a.listener == "bench") for r in range(a.rounds)]
        print(f"pull thread CPU per message, pull batch {a.pull_batch}, {a.n} messages: "
              f"median {statistics.median(ns_per):.0f} ns, min {min(ns_per):.0f} ns ({a.rounds} rounds)")
    finally:
        env.close()


if __name__ == "__main__":
    main()
