#!/usr/bin/env python3
"""CPU per local send in one producer thread, beside its floor: what the client costs per
message with no consumer sharing the cores (``shmq-bench produce`` measures the whole road).

    .venv/bin/python bench/local_send_cpu.py [--n 200000] [--rounds 5]

A broker for the run (``shmq.bench.services.Env``, ASYNC_FLUSH) and one ``Producer(local=
"always")``; 100 B bodies. Rows, each the median (and minimum) over the rounds of this thread's
user + system CPU time (``getrusage(RUSAGE_THREAD)``, so a busy machine moves it little):

* **floor**: ``Message(topic, body)`` alone (what the bench's py-floor row builds per message);
* **send**: ``send(Message(topic, body))``;
* **floor, batch**: the 64 ``Message()`` of a ``send_batch`` alone, per message;
* **send_batch(64)**: ``send_batch([Message(topic, b) for b in 64 bodies])``, per message.

The system part is mostly the CommitLog's page faults and file rolls, which a batch meets about
seven times as often per second of CPU as a send.

The loops run inside ``collections.deque(map(...), 0)``, so the same command under
``valgrind --tool=callgrind --toggle-collect=consume_iterator`` counts the loop only.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
from collections import deque

from shmq import Message, Producer
from shmq.bench.peers.shmq_client import create_topic
from shmq.bench.services import Env


def thread_cpu() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_utime, r.ru_stime


def measure(fn, calls: int, per_call: int, rounds: int) -> tuple[float, float, float]:
    """(median, minimum, median of the system part) µs of CPU per message over ``rounds`` runs
    of ``calls`` calls."""
    for _ in range(min(calls, 2000)):  # warm, outside deque's consume_iterator
        fn(0)
    runs, sys_runs = [], []
    for _ in range(rounds):
        u0, s0 = thread_cpu()
        deque(map(fn, range(calls)), 0)
        u1, s1 = thread_cpu()
        n = calls * per_call
        runs.append((u1 - u0 + s1 - s0) / n * 1e6)
        sys_runs.append((s1 - s0) / n * 1e6)
    return statistics.median(runs), min(runs), statistics.median(sys_runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000, help="messages per round (default 200,000)")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with Env() as env:
        ns, broker = env.namesrv(), env.broker("ASYNC_FLUSH")
        topic = f"LocalCpu{os.getpid()}"
        create_topic(broker, ns, topic, 4)
        p = Producer(f"local-cpu-{os.getpid()}", namesrv=ns, local="always")
        p.start()
        try:
            body = b"x" * 100
            bodies = [body] * 64
            send, send_batch = p.send, p.send_batch
            rows = [("floor: Message()", lambda _: Message(topic, body), args.n, 1),
                    ("send(Message())", lambda _: send(Message(topic, body)), args.n, 1),
                    ("floor, batch: 64 Message()", lambda _: [Message(topic, b) for b in bodies], args.n // 64, 64),
                    ("send_batch(64)", lambda _: send_batch([Message(topic, b) for b in bodies]), args.n // 64, 64)]
            print("| per message, 100 B | CPU µs median | min | system part (median) |\n|---|---:|---:|---:|")
            for name, fn, calls, per in rows:
                med, low, sys_part = measure(fn, calls, per, args.rounds)
                print(f"| {name} | {med:.3f} | {low:.3f} | {sys_part:.3f} |")
        finally:
            p.shutdown()


if __name__ == "__main__":
    main()
