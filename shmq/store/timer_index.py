"""The pending timers in memory: (due ms, timer-queue offset) pairs, nothing else.

Why this shape: a million pending timers must cost megabytes, not a Python object each. Far
timers sit in one-second buckets of packed int64 pairs (16 bytes a timer); a bucket becomes
a heap of tuples only when its second comes, so the heap holds about one second of timers
(10,000 at the rate the benchmark drives). The record itself stays in the CommitLog and is
read when the timer fires; the wheel's durable state is timer_marks' state bytes.
"""
from __future__ import annotations

import heapq
from array import array

BUCKET_MS = 1000


class TimerIndex:
    def __init__(self):
        self._buckets: dict[int, array] = {}    # second -> [ms, off, ms, off, ...]
        self._keys: list[int] = []              # heap of bucket seconds
        self._due: list[tuple[int, int]] = []   # heap of (ms, off) for seconds <= _current
        self._current = -1
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def add(self, ms: int, off: int) -> None:
        key = ms // BUCKET_MS
        if key <= self._current:
            heapq.heappush(self._due, (ms, off))
        else:
            b = self._buckets.get(key)
            if b is None:
                b = self._buckets[key] = array("q")
                heapq.heappush(self._keys, key)
            b.append(ms)
            b.append(off)
        self._n += 1

    def _open_until(self, key: int) -> None:
        """Move every bucket up to second ``key`` into the due heap."""
        moved = False
        while self._keys and self._keys[0] <= key:
            b = self._buckets.pop(heapq.heappop(self._keys))
            it = iter(b)
            self._due.extend(zip(it, it))
            moved = True
        if moved:
            heapq.heapify(self._due)
        if key > self._current:
            self._current = key

    def pop_due(self, now_ms: int, limit: int = 1 << 30) -> list[tuple[int, int]]:
        """The pairs due at ``now_ms`` (ms <= now), earliest first, at most ``limit``."""
        self._open_until(now_ms // BUCKET_MS)
        due, out = self._due, []
        while due and due[0][0] <= now_ms and len(out) < limit:
            out.append(heapq.heappop(due))
        self._n -= len(out)
        return out

    def next_due(self) -> int | None:
        """A lower bound of the earliest due time (exact once its second has opened)."""
        if self._due:
            return self._due[0][0]
        if self._keys:
            return self._keys[0] * BUCKET_MS
        return None

    def take_below(self, bound: int) -> list[tuple[int, int]]:
        """Remove and return every pair whose offset is below ``bound`` (the timers whose
        records sit in CommitLog files about to expire)."""
        out = [p for p in self._due if p[1] < bound]
        if out:
            self._due = [p for p in self._due if p[1] >= bound]
            heapq.heapify(self._due)
        for key in list(self._buckets):
            b = self._buckets[key]
            it = iter(b)
            pairs = list(zip(it, it))
            low = [p for p in pairs if p[1] < bound]
            if not low:
                continue
            out.extend(low)
            keep = array("q")
            for ms, off in pairs:
                if off >= bound:
                    keep.append(ms)
                    keep.append(off)
            self._buckets[key] = keep
        self._n -= len(out)
        return out
