"""bench/e2e_tail.py's per-message records (shmq/bench/tail.py, SHMQ_BENCH_TAIL_DIR): the
producer's (due, wait ended, send returned) and the consumer's (due, received) of every window
message, written as rows; kept in flat arrays, so recording them keeps no GC-tracked object a
message (a tuple a message made the recording processes run a cyclic collection every ~700
messages, inside the very tail being traced)."""
from __future__ import annotations

import gc
import glob
import json
import os

from shmq.bench.loops import Consumer, produce
from shmq.bench.scenarios import Scenario

from .test_bench_histogram import FakeClock


def _run(tailed: bool) -> tuple[Consumer, object, int]:
    """A paced e2e window of 3,000 messages, each received inside its send call; the
    GC-tracked objects it left alive (gen 0's count, collections off)."""
    from shmq.bench.tail import open_log
    clock = FakeClock()
    sc = Scenario(kind="e2e", rate=1000.0, duration=3.0, warmup=0.0)
    go = clock.t
    consumer = Consumer(sc, go, clock=clock)
    if not tailed:
        consumer.tail = None
    tail = open_log("producer") if tailed else None
    handle = consumer.handle

    def send(body: bytes) -> None:
        clock.t += 1000
        handle([body])

    gc.collect()
    gc.disable()
    try:
        before = gc.get_count()[0]
        out = produce(send, None, sc, 0, go, clock=clock, sleep=clock.sleep, tail=tail)
        kept = gc.get_count()[0] - before
    finally:
        gc.enable()
    assert out["sent"] == 3000
    return consumer, tail, kept


def test_records_are_written_as_rows_and_keep_no_tracked_object_a_message(tmp_path, monkeypatch):
    monkeypatch.setenv("SHMQ_BENCH_TAIL_DIR", str(tmp_path))
    _run(tailed=False)  # the first run's own allocations (code caches, ...) are not the records'
    consumer, tail, kept = _run(tailed=True)
    assert kept < 300, f"{kept} GC-tracked objects kept for 3,000 recorded messages"
    tail.dump("row")
    consumer.tail.dump("row")
    docs = {}
    for p in glob.glob(os.path.join(tmp_path, "*.json")):
        with open(p) as f:
            doc = json.load(f)
        docs[doc["kind"]] = doc
    prod, cons = docs["producer"]["rows"], docs["consumer"]["rows"]
    assert len(prod) == len(cons) == 3000
    assert all(len(r) == 3 and r[0] <= r[1] <= r[2] for r in prod)
    assert [r[0] for r in cons] == [r[0] for r in prod]
    assert all(p[1] < n <= p[2] for (s, n), p in zip(cons, prod))  # received inside its send call
