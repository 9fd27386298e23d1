#!/usr/bin/env python3
"""Which side bounds tcp_paths' ``send_async()`` and ``send_oneway()`` rows: the two rows alone,
run as tcp_paths runs them (one connection, 100 B, up to 2,000 async sends in flight; oneway
counted when stored), with each thread's CPU over the row's window.

    .venv/bin/python bench/async_rows_cpu.py [--duration 3] [--rounds 1] [--rows async,oneway] [--workers N]

A NameServer and a broker (ASYNC_FLUSH, tcp_paths' defaults) on a temp store, 300 sync sends to
warm the route and the worker's C path, then each row. Per row: msgs/s, and for every thread of
the producer (its caller, its client loop thread), the broker's workers and its supervisor that
ran in the window, the share of one CPU it used (``/proc/<pid>/task/<tid>/schedstat``'s run time
over the window's wall time) and its CPU per message. A thread near 100 % of a CPU is the row's
bound. Every process it starts is stopped by pid; the store goes to a temp dir that is removed.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import psutil  # noqa: E402
import tcp_paths as tp  # noqa: E402
import vs_rocketmq  # noqa: E402
from shmq import Message, Producer  # noqa: E402
from thread_stats import TICK, snap  # noqa: E402


def row(name: str, body, pids: dict[int, str]) -> None:
    b = snap(pids)
    t0 = time.perf_counter()
    rate = body()  # tcp_paths' own rate over (almost) the same window
    dt = time.perf_counter() - t0
    n = max(1, round(rate * dt))
    a = snap(pids)
    me = os.getpid()
    print(f"# {name}: {rate:,.0f} msgs/s (~{n:,} in {dt:.2f} s); load average {os.getloadavg()[0]:.2f}")
    print("| process | thread | share of a CPU | CPU µs/msg | user / system µs/msg | sleeps per 1,000 msgs |")
    print("|---|---|---:|---:|---|---:|")
    for k in sorted(a, key=lambda k: -(a[k].run_ns - b.get(k, a[k]).run_ns)):
        if k not in b:
            continue
        used = a[k].run_ns - b[k].run_ns
        if used < dt * 1e9 * 0.01:
            continue
        who = a[k].comm + (" (caller)" if k[1] == me else "")
        u, sy, v = (getattr(a[k], f) - getattr(b[k], f) for f in ("utime", "stime", "vol"))
        print(f"| {pids[k[0]]} | {k[1]} {who} | {used / (dt * 1e9) * 100:.0f} % | {used / n / 1e3:.2f} | "
              f"{u / TICK / n * 1e6:.2f} / {sy / TICK / n * 1e6:.2f} | {v / n * 1e3:.1f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--rows", default="async,oneway")
    ap.add_argument("--workers", type=int, default=None)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="async-rows-"))
    try:
        for rnd in range(a.rounds):
            pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", work / f"r{rnd}", a.workers)
            try:
                topic, queues = f"AsyncRows{rnd}", 4
                tp.create_topic(pair.addr, pair.namesrv, topic, queues)
                p = Producer("async-rows-pg", namesrv=pair.namesrv, local="never")
                p.start()
                for _ in range(tp.WARMUP):
                    p.send(Message(topic, tp.BODY))
                sup = psutil.Process(pair.procs[1].pid)
                pids = {os.getpid(): "producer", sup.pid: "supervisor"}
                for c in sup.children():
                    pids[c.pid] = f"worker {c.pid}"
                for r in a.rows.split(","):
                    if r == "async":
                        row("send_async(), 2,000 in flight", lambda: tp.async_sends(p, topic, a.duration), pids)
                    elif r == "oneway":
                        row("send_oneway() (stored)",
                            lambda: tp.oneway_sends(p, pair.addr, topic, queues, a.duration), pids)
                p.shutdown()
            finally:
                pair.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
