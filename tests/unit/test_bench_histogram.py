"""shmq-bench latency logic: coordinated-omission correction on a synthetic stall (fake
clock, no timing assertions), bulk recording, encoding across processes."""
from __future__ import annotations

import random

import pytest

pytest.importorskip("hdrh")

from shmq.bench import histogram
from shmq.bench.loops import Consumer, produce
from shmq.bench.scenarios import HEADER, Scenario

MS = 1_000_000


class FakeClock:
    def __init__(self, t: int = 10**12):
        self.t = t

    def __call__(self) -> int:
        self.t += 100  # every look at the clock costs 100 ns
        return self.t

    def sleep(self, seconds: float) -> None:
        self.t += int(seconds * 1e9)


def run_with_stall(stall_at: int, stall_ns: int, rate: float = 1000.0, count: int = 1000):
    """A paced producer whose send call ``stall_at`` takes ``stall_ns``; the consumer gets every
    message the instant its send returns. Returns (corrected latencies recorder, naive ones)."""
    clock = FakeClock()
    sc = Scenario(kind="e2e", rate=rate, count=count)
    go = clock.t
    consumer = Consumer(sc, go, clock=clock)
    naive = histogram.LatencyRecorder()

    def send(body: bytes) -> None:
        stamp, _, seq = HEADER.unpack_from(body)
        started = clock()
        clock.t += stall_ns if seq == stall_at else 1000
        consumer.handle([body])
        naive.add(consumer.last_ns - started)

    out = produce(send, None, sc, 0, go, clock=clock, sleep=clock.sleep)
    assert out["sent"] == count
    consumer.recorder.fold()
    naive.fold()
    return consumer, naive


def test_stall_shows_as_every_message_due_during_it():
    consumer, naive = run_with_stall(stall_at=500, stall_ns=200 * MS)
    assert consumer.received == 1000 and consumer.corrupt == 0 and consumer.duplicates == 0
    h = consumer.recorder.hist
    # ~200 messages were due during the 200 ms stall (1,000/s): their latencies run from 200 ms down
    late = sum(c for v, c in _values(h) if v > 10 * MS)
    assert 180 <= late <= 210
    assert h.get_max_value() >= 199 * MS
    assert h.get_value_at_percentile(90) >= 80 * MS
    assert h.get_value_at_percentile(50) < MS
    # timed from the actual send, the same run shows one slow message
    assert sum(c for v, c in _values(naive.hist) if v > 10 * MS) == 1
    assert naive.hist.get_value_at_percentile(99) < MS


def test_no_stall_no_late_messages():
    consumer, _ = run_with_stall(stall_at=-1, stall_ns=0)
    assert consumer.recorder.hist.get_max_value() < MS


def test_a_receiver_that_read_the_clock_itself_is_timed_from_then():
    """A push listener reads the clock on entry and hands it over with the bodies: the harness's
    own work after that (taking the bodies out, its lock) is not counted as latency."""
    clock = FakeClock()
    sc = Scenario(kind="e2e", rate=1000.0, count=2)
    consumer = Consumer(sc, clock.t, clock=clock, threadsafe=True)
    stamp = clock.t + 5_000
    body = HEADER.pack(stamp, 0, 0) + b"x" * (sc.size - HEADER.size)
    consumer.handle([body], stamp + 7_000)
    clock.t = stamp + 9_000_000  # the harness got to it late: not the receiver's latency
    consumer.handle([HEADER.pack(stamp, 0, 1) + body[HEADER.size:]])
    consumer.recorder.fold()
    got = sorted(v for v, c in _values(consumer.recorder.hist) for _ in range(c))
    assert len(got) == 2 and all(abs(g - w) <= w / 1000 for g, w in zip(got, (7_000, 9_000_100)))  # 3 digits


def _values(h):
    return [(it.value_iterated_to, it.count_added_in_this_iter_step) for it in h.get_recorded_iterator()]


def test_pacer_staggers_producers():
    p0, p1 = histogram.Pacer(1000, 1000.0), histogram.Pacer(1000, 1000.0, offset_ns=500_000)
    assert p0.due(0) == 1000 and p0.due(3) == 1000 + 3 * MS
    assert p1.due(1) - p0.due(1) == 500_000
    assert not histogram.Pacer(0, 0).paced


def test_bulk_recording_matches_one_by_one():
    rnd = random.Random(6)
    print("seed 6")
    samples = [int(rnd.lognormvariate(10, 2)) + 1 for _ in range(20_000)]
    bulk, single = histogram.new_histogram(), histogram.new_histogram()
    histogram.record_bulk(bulk, samples)
    for v in samples:
        single.record_value(v)
    assert bulk.get_total_count() == single.get_total_count() == len(samples)
    for p in (*histogram.PERCENTILES, 100.0):
        a, b = bulk.get_value_at_percentile(p), single.get_value_at_percentile(p)
        assert single.values_are_equivalent(a, b), (p, a, b)


def test_out_of_range_values_are_clamped():
    h = histogram.new_histogram()
    histogram.record_bulk(h, [-5, 0, histogram.HIGHEST_NS * 2])
    assert h.get_total_count() == 3


def test_encode_merge_summary():
    recs = []
    for k in range(3):
        r = histogram.LatencyRecorder()
        for v in range(1, 1001):
            r.add(v * 1000 * (k + 1))
        recs.append(r.encode())
    merged = histogram.merge(recs)
    assert merged.get_total_count() == 3000
    s = histogram.summary_us(merged)
    assert set(s) == {"p50", "p90", "p99", "p99.9", "p99.99", "max", "mean", "count"}
    assert s["p50"] <= s["p90"] <= s["p99"] <= s["p99.9"] <= s["p99.99"] <= s["max"]
    assert 2990 <= s["max"] <= 3010
    pts = histogram.spectrum_us(merged)
    assert pts[0][0] < 1 and pts[-1][0] == 100.0
    assert histogram.summary_us(histogram.new_histogram()) is None
