"""Per-message records for tracing a latency tail (``SHMQ_BENCH_TAIL_DIR``; off by default).

With the variable set to a directory, each paced producer writes, per message of the measured
window, its due time, when its wait for that time ended and when its send call returned; each
consumer writes each message's due time and the clock its receiver read (the latency's end),
with the thread that read it; the parent writes the row's service pids (a broker's processes).
``bench/e2e_tail.py`` reads them (and a ``perf sched`` trace of the same run) to say which
messages were late because the producer started late and which because the consumer ran late,
and what held the CPU meanwhile. The records are plain lists appended in the loops: off, the
loops test one attribute per call (producer) or per delivery (consumer).
"""
from __future__ import annotations

import json
import os
import threading
from array import array

ENV = "SHMQ_BENCH_TAIL_DIR"


def directory() -> str | None:
    return os.environ.get(ENV) or None


class TailLog:
    """One process's records; ``dump`` writes them as ``<row>-<kind>-<pid>.json``: ``rows`` is a
    flat array of ``width`` values a message (producer 3: due, wait ended, send returned; consumer
    2: due, received), written as a list of rows."""

    def __init__(self, kind: str):
        self.kind = kind
        self.width = 3 if kind == "producer" else 2
        self.rows = array("q")
        self.tid = 0

    def note_thread(self) -> None:
        if not self.tid:
            self.tid = threading.get_native_id()

    def dump(self, row: str, **extra) -> None:
        d = directory()
        if not d:
            return
        w, flat = self.width, self.rows.tolist()
        rows = [flat[i:i + w] for i in range(0, len(flat), w)]
        doc = {"kind": self.kind, "row": row, "pid": os.getpid(), "tid": self.tid, "rows": rows, **extra}
        with open(os.path.join(d, f"{row}-{self.kind}-{os.getpid()}.json"), "w") as f:
            json.dump(doc, f)


def open_log(kind: str) -> TailLog | None:
    return TailLog(kind) if directory() else None


def write_services(row: str, pids: list[int], go_ns: int) -> None:
    d = directory()
    if d:
        with open(os.path.join(d, f"{row}-services.json"), "w") as f:
            json.dump({"row": row, "pids": list(pids), "go_ns": go_ns}, f)
