"""Per-thread figures from /proc for the bench scripts that count wake-ups and CPU per message
(broker_wakes.py, paced_wakes.py, async_rows_cpu.py, async_gil_turns.py): one reader of the files, one tuple.

    snap(pids) -> {(pid, tid): ThreadStat}

Each figure is a running total since the thread started; a script takes two snaps around its
window and divides the differences by the messages in it. ``run_ns`` is schedstat's time on a
CPU (ns, exact); ``utime`` / ``stime`` are stat's ticks (``TICK`` a second: 10 ms steps, so read
over a long window); ``vol`` counts sleeps (so wake-ups), ``invol`` preemptions."""
from __future__ import annotations

import os
from typing import Iterable, NamedTuple

TICK = os.sysconf("SC_CLK_TCK")


class ThreadStat(NamedTuple):
    comm: str
    vol: int
    invol: int
    run_ns: int
    utime: int
    stime: int
    minflt: int


def snap(pids: Iterable[int]) -> dict[tuple[int, int], ThreadStat]:
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except FileNotFoundError:  # the process ended
            continue
        for tid in tids:
            base = f"/proc/{pid}/task/{tid}"
            try:
                comm = open(f"{base}/comm").read().strip()
                cs = [int(line.split()[1]) for line in open(f"{base}/status") if "ctxt_switches" in line]
                run = int(open(f"{base}/schedstat").read().split()[0])
                st = open(f"{base}/stat").read().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):  # the thread ended meanwhile
                continue
            out[(pid, int(tid))] = ThreadStat(comm, cs[0], cs[1], run, int(st[11]), int(st[12]), int(st[7]))
    return out
