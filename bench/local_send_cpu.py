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

Two limit rows beside them: **new file pages** stores the bytes of that many records (their size
read from two sends' commit-log offsets) into a fresh preallocated, mapped file, as the append
does, in 64 KiB slices; **warm pages** stores them again into the same pages. The first is what
any store writing a mapped log pays for its bytes alone on this machine (the page-cache page
made and zeroed at the first touch; on this VM it moves ~10x between runs, with whether the host
must back the guest page), the second the copy alone.

``--consumer busy`` (or ``row``) runs a local ``PushConsumer`` in a child process while the rows
run (``consume_threads=0``, batches of 32, a listener that only counts; ``busy``: it spins on the
store's commit position for seconds, never sleeping; ``row``: the bench row's 50 µs spin, then the
futex), so the send pays what it pays in ``shmq-bench produce``: the cache lines the append writes
(the commit position's line, the queue's next offset, the ConsumeQueue entry, the record's last
line) are read by the consumer on the other CPU between two sends, and each write to one of them
waits for the line to come back (RESULTS, "Session 11, local11").

The loops run inside ``collections.deque(map(...), 0)``, so the same command under
``valgrind --tool=callgrind --toggle-collect=consume_iterator`` counts the loop only. With
``--rows send`` (or ``floor``) only that row runs (and no limit rows): the instructions of one
send are then (Ir at --n 30000 - Ir at --n 10000) / 20000 with ``--rounds 1``.
"""
from __future__ import annotations

import argparse
import mmap
import os
import resource
import statistics
import tempfile
import time
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


def consume(ns: str, topic: str, spin_s: float, ready) -> None:
    """The ``--consumer`` child: a local push consumer of ``topic`` until its parent ends it."""
    import signal
    import threading

    from shmq import ConsumeResult, PushConsumer
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    ok = ConsumeResult.SUCCESS
    c = PushConsumer(f"local-cpu-c{os.getpid()}", namesrv=ns, model="CLUSTERING", local="always",
                     consume_from="LAST_OFFSET", consume_batch_size=32, rebalance_interval=1.0, consume_threads=0,
                     spin_s=spin_s, idle_wait_s=max(0.5, spin_s))
    c.subscribe(topic, "*")
    c.on_message(lambda msgs: ok)
    c.start()
    ready.set()
    stop.wait()
    c.shutdown()


def page_rows(record: int, n: int, rounds: int) -> list[tuple[str, float, float, float]]:
    """The two limit rows (see above) for ``n`` records of ``record`` bytes, as measure()'s triples."""
    size = -(-record * n // 65536) * 65536
    fresh, warm, fresh_sys, warm_sys = [], [], [], []
    chunk = b"x" * 65536
    for _ in range(rounds):
        with tempfile.TemporaryFile(dir=tempfile.gettempdir()) as f:
            os.posix_fallocate(f.fileno(), 0, size)
            mm = mmap.mmap(f.fileno(), size, mmap.MAP_SHARED)
            for runs, sys_runs in ((fresh, fresh_sys), (warm, warm_sys)):
                t0, (_, s0) = time.thread_time(), thread_cpu()  # thread_time: not in ticks (the copy alone is ms)
                for off in range(0, size, 65536):
                    mm[off:off + 65536] = chunk
                t1, (_, s1) = time.thread_time(), thread_cpu()
                runs.append((t1 - t0) / n * 1e6)
                sys_runs.append((s1 - s0) / n * 1e6)
            mm.close()
    return [(f"limit: {record} B records into new file pages", statistics.median(fresh), min(fresh),
             statistics.median(fresh_sys)),
            (f"limit: the same into warm pages", statistics.median(warm), min(warm), statistics.median(warm_sys))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=200_000, help="messages per round (default 200,000)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rows", default="all", help="all (default), or a comma list of: floor, send, floor-batch, batch")
    ap.add_argument("--consumer", choices=("none", "busy", "row"), default="none",
                    help="a local PushConsumer in a child process while the rows run (see above)")
    args = ap.parse_args()
    names = ("floor", "send", "floor-batch", "batch")
    only = set(names) if args.rows == "all" else set(args.rows.split(","))
    if not only <= set(names):
        ap.error(f"--rows: one or more of {', '.join(names)}")
    with Env() as env:
        ns, broker = env.namesrv(), env.broker("ASYNC_FLUSH")
        topic = f"LocalCpu{os.getpid()}"
        create_topic(broker, ns, topic, 4)
        p = Producer(f"local-cpu-{os.getpid()}", namesrv=ns, local="always")
        p.start()
        child = None
        if args.consumer != "none":
            import multiprocessing
            ctx = multiprocessing.get_context("spawn")
            ready = ctx.Event()
            child = ctx.Process(target=consume, args=(ns, topic, 2.0 if args.consumer == "busy" else 50e-6, ready))
            child.start()
            if not ready.wait(60):
                raise RuntimeError("the consumer did not start")
            time.sleep(2.0)  # its rebalance and first wait
        try:
            body = b"x" * 100
            bodies = [body] * 64
            send, send_batch = p.send, p.send_batch
            rows = [("floor: Message()", lambda _: Message(topic, body), args.n, 1),
                    ("send(Message())", lambda _: send(Message(topic, body)), args.n, 1),
                    ("floor, batch: 64 Message()", lambda _: [Message(topic, b) for b in bodies], args.n // 64, 64),
                    ("send_batch(64)", lambda _: send_batch([Message(topic, b) for b in bodies]), args.n // 64, 64)]
            print("| per message, 100 B | CPU µs median | min | system part (median) |\n|---|---:|---:|---:|")
            for key, (name, fn, calls, per) in zip(names, rows):
                if key not in only:
                    continue
                med, low, sys_part = measure(fn, calls, per, args.rounds)
                print(f"| {name} | {med:.3f} | {low:.3f} | {sys_part:.3f} |")
            if args.rows != "all":
                return
            a, b = send(Message(topic, body)), send(Message(topic, body))
            record = int(b.offset_msg_id[16:], 16) - int(a.offset_msg_id[16:], 16)
            for name, med, low, sys_part in page_rows(record, args.n, args.rounds):
                print(f"| {name} | {med:.3f} | {low:.3f} | {sys_part:.3f} |")
        finally:
            if child is not None:
                child.terminate()
                child.join(30)
            p.shutdown()


if __name__ == "__main__":
    main()
