#!/usr/bin/env python3
"""Who runs, per message, while one producer makes sync ``send()`` calls over TCP: every thread of
the broker's supervisor and workers, the NameServer and the producer process itself.

    .venv/bin/python bench/broker_wakes.py [N] [--workers W] [--echo]

A NameServer and a broker (ASYNC_FLUSH, W workers; default: the broker's own default) on a temp
store, a topic of 4 queues, 2,000 warm-up sends, then N (default 20,000) ``Producer(local=
"never").send`` of 100 B, each timed. For each thread that ran in the window it prints, per
message: voluntary and involuntary context switches (/proc/<pid>/task/<tid>/status: a voluntary
one is a sleep, so also a wake-up), CPU (schedstat's run time), user and system time (stat's
ticks, 10 ms steps: read over a long window) and minor faults. A thread with nothing to do for a
message should show ~0 wake-ups per message. ``--echo`` first prints the same figures for the
raw round trip of tcp_paths' limit row (its blocking echo server and a blocking client, a
200-byte frame each way): what each side of one round trip costs before any broker work. Every
process it starts is stopped by pid; the
store goes to a temp dir that is removed."""
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


def echo(n: int) -> None:
    """The raw blocking echo's server and client (this process), per round trip."""
    import socket
    import struct
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            tp._echo_blocking(w)
        finally:
            os._exit(0)
    os.close(w)
    (port,) = struct.unpack("<I", os.read(r, 4))
    os.close(r)
    try:
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        msg, lat = b"y" * tp.FRAME, []
        for i in range(2000 + n):
            if i == 2000:
                before, t0 = snap([pid, os.getpid()]), time.perf_counter()
            t = time.perf_counter()
            s.sendall(msg)
            got = 0
            while got < tp.FRAME:
                got += len(s.recv(65536))
            lat.append(time.perf_counter() - t)
        dt = time.perf_counter() - t0
        after = snap([pid, os.getpid()])
        s.close()
    finally:
        os.kill(pid, 15)
        os.waitpid(pid, 0)
    print(f"# raw blocking echo, {n:,} round trips: {n / dt:,.0f}/s, p50 {tp.pct(lat[2000:], .5):.0f} µs")
    for k in sorted(after):
        if k in before:
            (_, _, _, r0, u0, s0, _), (_, _, _, r1, u1, s1, _) = before[k], after[k]
            if r1 > r0:
                print(f"#   {'echo server' if k[0] == pid else 'client'} {k[1]}: CPU {(r1 - r0) / n / 1e3:.2f} µs "
                      f"(user {(u1 - u0) / TICK / n * 1e6:.1f} / sys {(s1 - s0) / TICK / n * 1e6:.1f})")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", type=int, nargs="?", default=20000)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--echo", action="store_true")
    a = ap.parse_args()
    n = a.n
    if a.echo:
        echo(n)
    work = Path(tempfile.mkdtemp(prefix="broker-wakes-"))
    pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", work / "store", a.workers)
    try:
        p = Producer("wakes-pg", namesrv=pair.namesrv, local="never")
        p.start()
        tp.create_topic(pair.addr, pair.namesrv, "Wakes", 4)
        sup = psutil.Process(pair.procs[1].pid)
        names = {sup.pid: "supervisor", pair.procs[0].pid: "namesrv", os.getpid(): "producer"}
        for c in sup.children():
            names[c.pid] = f"worker {c.pid}"
        for _ in range(2000):
            p.send(Message("Wakes", b"x" * 100))
        time.sleep(0.5)
        before = snap(list(names))
        lat = []
        t0 = time.perf_counter()
        for _ in range(n):
            s = time.perf_counter()
            p.send(Message("Wakes", b"x" * 100))
            lat.append(time.perf_counter() - s)
        dt = time.perf_counter() - t0
        after = snap(list(names))
        print(f"# {n:,} sync sends: {n / dt:,.0f}/s, p50 {tp.pct(lat, .5):.0f} µs; load average {os.getloadavg()[0]:.2f}")
        print("| process | thread | voluntary / involuntary switches per msg | CPU µs/msg (user / sys) | minor faults per msg |")
        print("|---|---|---|---|---|")
        for k in sorted(after):
            if k not in before:
                continue
            c, v0, i0, r0, u0, s0, f0 = before[k]
            _, v1, i1, r1, u1, s1, f1 = after[k]
            if v1 - v0 + i1 - i0 == 0 and r1 == r0:
                continue
            print(f"| {names[k[0]]} | {k[1]} ({c}) | {(v1 - v0) / n:.3f} / {(i1 - i0) / n:.3f} | "
                  f"{(r1 - r0) / n / 1e3:.2f} ({(u1 - u0) / TICK / n * 1e6:.1f} / {(s1 - s0) / TICK / n * 1e6:.1f}) | "
                  f"{(f1 - f0) / n:.3f} |")
        p.shutdown()
    finally:
        pair.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
