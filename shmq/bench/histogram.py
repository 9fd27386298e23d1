"""Latency recording: HDR histograms, and the pacing that keeps them honest.

Coordinated omission. A producer that sends at a fixed rate and stalls for 100 ms does not
send the ~1,000 messages that were due during the stall; a harness that stamps each message
with the time it was *actually* sent then reports one slow message (or none, if the stall was
in the producer) instead of a thousand. Here a paced producer stamps every message with its
*intended* send time (``Pacer.due(i)``: start + i / rate), sends late messages back to back
when it falls behind, and the consumer records ``received - intended``. A stall then shows as
the latencies of every message that should have been sent during it, decreasing linearly
from the stall's length to zero, which is what a user sending at that rate would have seen.
Without a rate (as fast as possible) the stamp is the actual send time.

``LatencyRecorder.add(ns)`` is the hot path (an ``array`` append, ~50 ns); samples are folded
into the HDR histogram (1 ns .. 1 h, 3 significant digits) in bulk, by value class, so
recording a million samples costs numpy time, not a million ``record_value`` calls.
Histograms travel between processes as the HdrHistogram compressed encoding (text).
"""
from __future__ import annotations

import time
from array import array

from hdrh.histogram import HdrHistogram

LOWEST_NS = 1
HIGHEST_NS = 3600 * 1_000_000_000
SIGNIFICANT = 3

#: The percentiles every result reports (plus max).
PERCENTILES = (50.0, 90.0, 99.0, 99.9, 99.99)

#: Samples buffered before folding into the histogram (bounds a consumer's memory).
FOLD_EVERY = 1 << 21


def new_histogram() -> HdrHistogram:
    return HdrHistogram(LOWEST_NS, HIGHEST_NS, SIGNIFICANT)


class LatencyRecorder:
    """Latency samples in nanoseconds, one recorder per consumer (not thread-safe for
    ``fold``; ``add`` from several threads is safe under the GIL)."""

    __slots__ = ("hist", "_buf", "add")

    def __init__(self) -> None:
        self.hist = new_histogram()
        self._buf = array("q")
        self.add = self._buf.append  # the hot path: one bound-method call per sample

    def add_many(self, values) -> None:
        self._buf.extend(values)

    def maybe_fold(self) -> None:
        """Fold when the buffer is large (call between batches, off the critical path)."""
        if len(self._buf) >= FOLD_EVERY:
            self.fold()

    def fold(self) -> None:
        """Move the buffered samples into the histogram."""
        buf = self._buf
        if not buf:
            return
        record_bulk(self.hist, buf)
        del buf[:]

    @property
    def count(self) -> int:
        return self.hist.get_total_count() + len(self._buf)

    def encode(self) -> str:
        self.fold()
        return encode(self.hist)


def record_bulk(hist: HdrHistogram, samples) -> None:
    """Record many samples: values are first reduced to their HDR value class (the
    histogram cannot tell apart values closer than its precision anyway), then each
    distinct class is recorded once with its count. Values outside the trackable range are
    clamped to it (a negative latency is a clock artefact of ~nothing: 1 ns)."""
    import numpy as np

    v = np.frombuffer(samples, dtype=np.int64) if isinstance(samples, array) else np.asarray(samples, dtype=np.int64)
    v = np.clip(v, LOWEST_NS, HIGHEST_NS)
    # 3 significant decimal digits need 2048 sub-buckets per power of two: keep the top 12 bits.
    mag = np.maximum(np.floor(np.log2(v.astype(np.float64))).astype(np.int64) - 11, 0)
    q = (v >> mag) << mag
    values, counts = np.unique(q, return_counts=True)
    rec = hist.record_value
    for value, count in zip(values.tolist(), counts.tolist()):
        rec(value, count)


def encode(hist: HdrHistogram) -> str:
    return hist.encode().decode("ascii")


def decode(text: str) -> HdrHistogram:
    return HdrHistogram.decode(text.encode("ascii"))


def merge(encoded: list[str]) -> HdrHistogram:
    out = new_histogram()
    for text in encoded:
        if text:
            out.add(decode(text))
    return out


def summary_us(hist: HdrHistogram) -> dict[str, float] | None:
    """{"p50": µs, "p90": ..., "p99.99": ..., "max": ..., "mean": ..., "count": n}; None when empty."""
    n = hist.get_total_count()
    if n == 0:
        return None
    out: dict[str, float] = {}
    for p in PERCENTILES:
        out[f"p{p:g}"] = round(hist.get_value_at_percentile(p) / 1000.0, 3)
    out["max"] = round(hist.get_max_value() / 1000.0, 3)
    out["mean"] = round(hist.get_mean_value() / 1000.0, 3)
    out["count"] = n
    return out


def spectrum_us(hist: HdrHistogram, ticks_per_half: int = 5) -> list[tuple[float, float]]:
    """(percentile, µs) points for a percentile-spectrum plot (HdrHistogram's classic
    "latency by percentile" chart), from p0 to the max."""
    if hist.get_total_count() == 0:
        return []
    pts: list[tuple[float, float]] = []
    for item in hist.get_percentile_iterator(ticks_per_half):
        pts.append((item.percentile_level_iterated_to, hist.get_highest_equivalent_value(item.value_iterated_to) / 1000.0))
        if item.percentile_level_iterated_to >= 100.0:
            break
    return pts


# ---------------------------------------------------------------------------- pacing --
class Pacer:
    """When each message is due, for a producer sending ``rate`` messages/s from ``start_ns``
    (``rate`` 0: as fast as possible, every message due at once). ``offset_ns`` staggers
    several producers sharing one total rate."""

    __slots__ = ("start_ns", "interval_ns", "offset_ns")

    def __init__(self, start_ns: int, rate: float, offset_ns: int = 0):
        self.start_ns = start_ns
        self.interval_ns = 1e9 / rate if rate > 0 else 0.0
        self.offset_ns = offset_ns

    @property
    def paced(self) -> bool:
        return self.interval_ns > 0

    def due(self, i: int) -> int:
        """The intended send time of message ``i`` (ns, the monotonic clock)."""
        return self.start_ns + self.offset_ns + int(i * self.interval_ns)


def set_timer_slack_ns(ns: int = 1000) -> bool:
    """Ask Linux for tighter sleeps in this thread (the default 50 µs slack would add up to
    50 µs to every paced send). Best effort."""
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(29, ns, 0, 0, 0) == 0  # PR_SET_TIMERSLACK
    except (OSError, AttributeError):
        return False


def wait_until(due_ns: int, clock=time.monotonic_ns, sleep=time.sleep, spin_ns: int = 30_000) -> int:
    """Sleep, then spin the last ``spin_ns``, until ``due_ns``; returns the clock then."""
    now = clock()
    remaining = due_ns - now
    if remaining > spin_ns:
        sleep((remaining - spin_ns) / 1e9)
        now = clock()
    while now < due_ns:
        now = clock()
    return now
