#!/usr/bin/env python3
"""Many queues: what the first message to a new queue costs, and what a queue costs on disk.

    .venv/bin/python bench/many_queues.py [--topics 200] [--queues 8] [--rounds 5] [--paths local tcp]

One NameServer and one broker (``shmq.bench.services.Env``, a temporary store); ``--topics``
topics of ``--queues`` queues are created by the admin API, and every producer's routes are
fetched before the timed part (what is measured is the queue, not a NameServer lookup). Then,
for each path (a ``local="auto"`` producer appending through the shared mapping, and a
``local="never"`` one over TCP), each on its own topics: ``--rounds`` rounds, each sending
100 B to every queue in turn (8 consecutive ``send()`` per topic go to its 8 queues).
Round 1 is every queue's first message; rounds 2.. are plain sends to queues already written.

Printed per path, from the same run: first-message latency (p50, p99, max; and separately the
first message of each topic, which also builds the producer's per-topic state), plain-send
p50/p99 of the later rounds, the ratio first p50 / plain p50 (target: <= 10), round-1
msgs/s. A LIMIT row, measured in the same run beside the store (same file system): what a new
queue's first page costs the kernel, in a fresh 6,000,000-byte sparse file each time (as the
store's ConsumeQueue files): map it (open + fstat + mmap + close), allocate the page (pwrite of
4 KiB of zeros), and touch it through the mapping (its first store: a fault); the sum is the
floor of a first message that does all of it on its path. Then the store's disk use: allocated bytes (st_blocks * 512) of every ConsumeQueue
file, and of the whole store, against the number of queues and the bytes stored.
"""
from __future__ import annotations

import argparse
import mmap
import os
import tempfile
import statistics
import sys
import time

from shmq.bench.services import Env
from shmq.client import Message, Producer
from shmq.client.admin import Admin

BODY = b"x" * 100


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def allocated(root: str) -> tuple[int, int, int]:
    """(bytes allocated to ConsumeQueue files, their number, bytes allocated under root incl.
    directories)."""
    cq_bytes = cq_files = total = 0
    for d, dirs, names in os.walk(root):
        total += os.lstat(d).st_blocks * 512
        for n in names:
            st = os.lstat(os.path.join(d, n))
            total += st.st_blocks * 512
            if os.sep + "consumequeue" + os.sep in d + os.sep:
                cq_bytes += st.st_blocks * 512
                cq_files += 1
    return cq_bytes, cq_files, total


def page_limit(near: str, n: int = 200, file_bytes: int = 6_000_000) -> dict:
    """The kernel's part of a new queue's first message, µs per part (p50 of ``n`` fresh sparse
    files in a scratch directory beside ``near``): map, pwrite of the first page, first store."""
    parts = {"map": [], "pwrite": [], "touch": []}
    zeros = bytes(4096)
    tick = time.perf_counter
    with tempfile.TemporaryDirectory(dir=os.path.dirname(near)) as d:
        for i in range(n):
            path = os.path.join(d, f"{i:05d}")
            with open(path, "wb") as f:
                f.truncate(file_bytes)
            a = tick()
            fd = os.open(path, os.O_RDWR)
            os.fstat(fd)
            mm = mmap.mmap(fd, file_bytes)
            b = tick()
            os.pwrite(fd, zeros, 0)
            c = tick()
            mm[0] = 1
            e = tick()
            os.close(fd)
            mm.close()
            parts["map"].append(b - a)
            parts["pwrite"].append(c - b)
            parts["touch"].append(e - c)
            os.unlink(path)
    return {k: statistics.median(v) * 1e6 for k, v in parts.items()}


def run_path(path: str, ns: str, topics: list[str], queues: int, rounds: int) -> dict:
    p = Producer(f"mq-bench-{path}", ns, local="auto" if path == "local" else "never").start()
    try:
        learn = []
        for t in topics:
            a = time.perf_counter()
            p._publish_info(t)  # the route, fetched before the clock starts (a local producer
            learn.append(time.perf_counter() - a)  # also maps the topic's queue files then)
        first, topic_first, plain = [], [], []
        seen: set = set()
        r1 = 0.0
        for rnd in range(rounds):
            t_round = time.perf_counter()
            for t in topics:
                msg = Message(t, BODY)
                for i in range(queues):
                    a = time.perf_counter()
                    r = p.send(msg)
                    dt = time.perf_counter() - a
                    key = (t, r.queue.queue_id)
                    if key in seen:
                        plain.append(dt)
                    else:
                        seen.add(key)
                        (topic_first if i == 0 else first).append(dt)
            if rnd == 0:
                r1 = time.perf_counter() - t_round
        allf = first + topic_first
        return {"path": path, "queues": len(seen), "first": allf, "queue_first": first,
                "topic_first": topic_first, "plain": plain, "learn": learn, "round1_rate": len(topics) * queues / r1}
    finally:
        p.shutdown()


def report(r: dict) -> None:
    us = 1e6
    fp50, pp50 = statistics.median(r["first"]) * us, statistics.median(r["plain"]) * us
    print(f"{r['path']:5s} queues {r['queues']:6d}  first msg p50 {fp50:8.1f} us  p99 {pct(r['first'], .99) * us:8.1f}"
          f"  max {max(r['first']) * us:8.1f} | topic's first p50 {statistics.median(r['topic_first']) * us:8.1f}"
          f" | other queues' first p50 {statistics.median(r['queue_first'] or [0]) * us:8.1f}"
          f" | plain p50 {pp50:7.1f} us  p99 {pct(r['plain'], .99) * us:8.1f}"
          f" | first/plain {fp50 / pp50:6.1f}x | round 1 {r['round1_rate']:9.0f} msgs/s"
          f" | route learnt p50 {statistics.median(r['learn']) * us:7.1f} us a topic (before the clock)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topics", type=int, default=200)
    ap.add_argument("--queues", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--paths", nargs="+", default=["local", "tcp"], choices=["local", "tcp"])
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args(argv)
    with Env(workers=a.workers) as env:
        ns = env.namesrv()
        broker = env.broker()
        store = next(iter(env._stores))
        names = {path: [f"MQ{path}{i:05d}" for i in range(a.topics)] for path in a.paths}
        with Admin(ns) as adm:
            for ts in names.values():
                for t in ts:
                    adm.create_topic(t, a.queues, broker_addr=broker)
        time.sleep(1.5)  # one registration period: the NameServer routes every topic
        cq0, n0, _ = allocated(store)
        print(f"{a.topics} topics x {a.queues} queues per path, {a.rounds} rounds of 100 B; broker workers "
              f"{a.workers}; before sending: {n0} ConsumeQueue files, {cq0 / 1e6:.1f} MB allocated")
        results = [run_path(path, ns, names[path], a.queues, a.rounds) for path in a.paths]
        for r in results:
            report(r)
        lim = page_limit(store)
        floor = sum(lim.values())
        pp50 = min(statistics.median(r["plain"]) for r in results) * 1e6
        print(f"LIMIT a new page of a sparse file (beside the store, p50 of 200): map {lim['map']:.1f} + pwrite 4 KiB "
              f"{lim['pwrite']:.1f} + first store {lim['touch']:.1f} = {floor:.1f} us ({floor / pp50:.1f}x the plain p50; "
              f"page alone {lim['pwrite'] + lim['touch']:.1f} us)")
        cq, n, total = allocated(store)
        nq = sum(r["queues"] for r in results)
        stored = sum(len(r["first"]) + len(r["plain"]) for r in results)
        print(f"disk: {nq} queues written, {stored} messages; {n} ConsumeQueue files allocate {cq / 1e6:.2f} MB "
              f"({cq / max(nq, 1) / 1024:.1f} KiB per queue, {stored * 20 / 1e6:.2f} MB of entries stored); "
              f"whole store {total / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
