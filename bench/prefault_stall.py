#!/usr/bin/env python3
"""The CommitLog pre-touch (``CommitLog.prefault``, what the owner's flush thread runs for the
file being written and the next one) on fresh files: its cost per 4 KiB page and how long it
stops the owner's other threads.

    .venv/bin/python bench/prefault_stall.py [--mib 256] [--rounds 4]

Each round creates a fresh CommitLog file of ``--mib`` MiB (preallocated, as the store does) and
pre-touches it whole, while a ticker thread of the same process sleeps 1 ms at a time and notes
when it woke. Printed per round: wall and thread CPU per page of the call, GB/s, and the
ticker's longest gap inside the call (a thread that needs the GIL waits that long: with the GIL
held by the call, the gap is the whole call). The files are kept until the end (each round's
pages are new memory, as a CommitLog's are), then removed with the temporary directory. Run it
with ``PYTHONPATH=<another tree>`` to measure that tree's prefault. (Session 6 measured a C pre-touch
with the GIL released beside the Python one with it; the first stopped other threads ~1 ms instead
of the whole call, but the local batch row was slower with it in 4 of 4 alternated pairs, so main
keeps the Python call: RESULTS, "Session 6, pagefloor".)
"""
from __future__ import annotations

import argparse
import mmap
import statistics
import tempfile
import threading
import time

from shmq.store.commitlog import CommitLog
from shmq.store.config import StoreConfig


class Ticker:
    def __init__(self):
        self.ticks: list[float] = []
        self.stop = False
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self) -> None:
        while not self.stop:
            self.ticks.append(time.monotonic())
            time.sleep(0.001)

    def longest_gap(self, t0: float, t1: float) -> float:
        inside = [t0] + [t for t in self.ticks if t0 < t < t1] + [t1]
        return max(b - a for a, b in zip(inside, inside[1:]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=256, help="file size, MiB (default 256: the bench broker's)")
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args()
    size = args.mib << 20
    pages = size // mmap.PAGESIZE
    with tempfile.TemporaryDirectory(prefix="prefault-") as root:
        log = CommitLog(StoreConfig(root=root, mapped_file_size_commitlog=size))
        ticker = Ticker()
        rows = []
        try:
            for i in range(args.rounds):
                log.create(i)
                log.map(i)
                time.sleep(0.02)
                w0, c0 = time.monotonic(), time.thread_time()
                log.prefault(i)
                w1, c1 = time.monotonic(), time.thread_time()
                gap = ticker.longest_gap(w0, w1)
                rows.append(((w1 - w0) / pages * 1e9, (c1 - c0) / pages * 1e9, size / (w1 - w0) / 1e9, gap * 1e3,
                             (w1 - w0) * 1e3))
                print(f"round {i}: wall {rows[-1][0]:,.0f} ns/page, cpu {rows[-1][1]:,.0f} ns/page, "
                      f"{rows[-1][2]:.2f} GB/s; call {rows[-1][4]:.0f} ms, longest stall of another thread "
                      f"{rows[-1][3]:.1f} ms", flush=True)
        finally:
            ticker.stop = True
            log.close()
        med = [statistics.median(r[k] for r in rows) for k in range(5)]
        print(f"median: wall {med[0]:,.0f} ns/page, cpu {med[1]:,.0f} ns/page, {med[2]:.2f} GB/s; "
              f"call {med[4]:.0f} ms, longest stall {med[3]:.1f} ms")


if __name__ == "__main__":
    main()
