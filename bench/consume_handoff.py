#!/usr/bin/env python3
"""The consumer's hand-over alone: the client loop thread hands one task per wake-up to a
pool of 20 consume threads, as a caught-up TCP consumer does once per one-message pull.

    .venv/bin/python bench/consume_handoff.py [--n 8000] [--rounds 6]

A child process writes one byte to a pipe every 120 µs; the loop thread reads it and submits
one task. Two pools, alternated: ``handoff`` (client/handoff.py: the wake-up paid by the
loop's C epoll call once the GIL is free) and ``queue`` (a queue.SimpleQueue and 20 threads,
the ConsumePool before it: the wake-up from the loop thread with the GIL held). Prints CPU of
the process and context switches per hand-over (getrusage), and the latency from the loop's
read to the task's start on its thread, one line per run.
"""
from __future__ import annotations

import argparse
import asyncio
import os
import queue
import resource
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from shmq.client.handoff import ConsumePool, HandoffSelector  # noqa: E402


class QueuePool:
    """The peer: the previous ConsumePool (a SimpleQueue; the put wakes a thread at once)."""

    def __init__(self, n: int):
        self._q: queue.SimpleQueue = queue.SimpleQueue()
        for _ in range(n):
            threading.Thread(target=self._run, daemon=True).start()

    def submit(self, fn, *args) -> None:
        self._q.put((fn, args))

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            item[0](*item[1])

    def shutdown(self) -> None:
        for _ in range(20):
            self._q.put(None)


def one_run(kind: str, n: int) -> str:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the writer: one byte every 120 µs (spinning, so the pace holds)
        os.close(r)
        for _ in range(n):
            t = time.perf_counter() + 0.00012
            while time.perf_counter() < t:
                pass
            os.write(w, b"x")
        os._exit(0)
    os.close(w)
    os.set_blocking(r, False)
    sel = HandoffSelector() if kind == "handoff" else None
    loop = asyncio.SelectorEventLoop(sel) if sel is not None else asyncio.new_event_loop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    time.sleep(0.05)
    pool = ConsumePool(20, "bench", sel, th) if sel is not None else (
        ConsumePool(20, "bench") if kind == "post" else QueuePool(20))
    done, count, lat = threading.Event(), [0], []
    clock = time.perf_counter

    def task(t0):
        lat.append(clock() - t0)  # from the loop's read to the listener's thread starting
        count[0] += 1
        if count[0] >= n:
            done.set()

    def readable():
        data = os.read(r, 4096)
        t0 = clock()
        for _ in data:
            pool.submit(task, t0)
    ru0 = resource.getrusage(resource.RUSAGE_SELF)
    loop.call_soon_threadsafe(loop.add_reader, r, readable)
    done.wait(120)
    ru1 = resource.getrusage(resource.RUSAGE_SELF)
    os.waitpid(pid, 0)
    loop.call_soon_threadsafe(loop.stop)
    th.join(5)
    pool.shutdown()
    loop.close()
    os.close(r)
    k = max(1, count[0])
    cpu = ru1.ru_utime - ru0.ru_utime + ru1.ru_stime - ru0.ru_stime
    lat.sort()
    p50, p99 = (lat[min(len(lat) - 1, int(len(lat) * q))] * 1e6 for q in (0.5, 0.99))
    return (f"{kind:8s} {count[0]} hand-overs: latency p50 {p50:5.1f} p99 {p99:6.1f} µs; CPU {cpu / k * 1e6:5.1f} µs each, voluntary switches "
            f"{(ru1.ru_nvcsw - ru0.ru_nvcsw) / k:.2f}, involuntary {(ru1.ru_nivcsw - ru0.ru_nivcsw) / k:.2f}; "
            f"load {os.getloadavg()[0]:.1f}")


KINDS = ("queue", "handoff")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=8000)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--post", action="store_true", help="also the new pool posting at once (GIL released by cffi)")
    a = ap.parse_args()
    global KINDS
    KINDS = ("queue", "handoff", "post") if a.post else ("queue", "handoff")
    for _ in range(a.rounds):
        for kind in KINDS:
            # each run in its own process: no threads or loops left over from the one before
            if (pid := os.fork()) == 0:
                print(one_run(kind, a.n), flush=True)
                os._exit(0)
            os.waitpid(pid, 0)


if __name__ == "__main__":
    main()
