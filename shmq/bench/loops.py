"""The producer and consumer loops every adapter runs, so shmq and each peer do exactly the
same work around their own send and receive calls.

Both loops take their clock and their stop test as arguments, so the tests drive them with a
fake clock (tests/unit/test_bench_histogram.py: a synthetic stall).
"""
from __future__ import annotations

import threading
import time
from typing import Callable

from .histogram import LatencyRecorder, Pacer, wait_until
import struct

from .scenarios import HEADER, Scenario
from .tail import TailLog, open_log

STAMP = struct.Struct("<q")

STOP_CHECK_EVERY = 64  # send calls between looks at the stop flag


def producer_count(sc: Scenario, idx: int) -> int:
    """Messages producer ``idx`` sends in count mode (the total split evenly)."""
    if not sc.count_mode:
        return 0
    q, r = divmod(sc.count, sc.producers)
    return q + (1 if idx < r else 0)


def produce(send: Callable, send_batch: Callable | None, sc: Scenario, idx: int, go_ns: int, *,
            stop: Callable[[], bool] = lambda: False, progress: Callable[[int], None] | None = None,
            clock: Callable[[], int] = time.monotonic_ns, sleep: Callable[[float], None] = time.sleep,
            tail: TailLog | None = None) -> dict:
    """Send this producer's share; returns {"sent", "sent_window", "end_ns", "ack_histogram"}
    (the time from each call's intended start to its return: for sync-flush, the durable answer).

    Paced (``sc.rate``): message i is due at ``go + offset + i / rate_per_producer`` and is
    stamped with that due time whether it leaves on time or late (coordinated omission).
    Unpaced: stamped with the clock just before the send call. ``tail`` (bench/tail.py): paced,
    each window message's due time, its wait's end and its send's return are appended to it."""
    rate = sc.rate / sc.producers if sc.rate else 0.0
    pacer = Pacer(go_ns, rate, offset_ns=int(idx * (1e9 / sc.rate)) if sc.rate else 0)
    paced = pacer.paced
    count = producer_count(sc, idx)
    warm_end = go_ns + (0 if sc.count_mode else int(sc.warmup * 1e9))
    end = None if sc.count_mode else go_ns + int((sc.warmup + sc.duration) * 1e9)
    pad = b"x" * (sc.size - HEADER.size)
    pack = HEADER.pack
    b = sc.batch
    seq = sent_window = calls = 0
    acks = LatencyRecorder()  # intended send time -> the send call returned (one sample per call)
    ack = acks.add
    lates = LatencyRecorder()  # paced, measured window: how late each send call started (pacing error)
    late = lates.add
    while True:
        if count and seq >= count:
            break
        calls += 1
        if calls % STOP_CHECK_EVERY == 0:
            if stop():
                break
            if progress is not None:
                progress(seq)
        n = min(b, count - seq) if count else b
        if paced:  # the bodies are made before the due time (_send_when_due says why)
            stamp = pacer.due(seq)
            if end is not None and stamp >= end:
                break
            started = _send_when_due([pack(stamp, idx, seq + k) + pad for k in range(n)], stamp, send, send_batch,
                                     clock, sleep)
            if stamp >= warm_end:
                late(started - stamp)
                if tail is not None:
                    tail.rows.extend((stamp, started, clock()))
        else:  # as fast as possible: stamped just before the call (no list: the loop is the rate)
            stamp = clock()
            if end is not None and stamp >= end:
                break
            if n == 1 or send_batch is None:
                for k in range(n):
                    send(pack(stamp, idx, seq + k) + pad)
            else:
                send_batch([pack(stamp, idx, seq + k) + pad for k in range(n)])
        seq += n
        if stamp >= warm_end:
            sent_window += n
            ack(clock() - stamp)
    if progress is not None:
        progress(seq)
    return {"sent": seq, "sent_window": sent_window, "end_ns": clock(), "ack_histogram": acks.encode(),
            "late_histogram": lates.encode()}


def _send_when_due(bodies: list, due: int, send, send_batch, clock, sleep) -> int:
    """Wait until ``due``, then send ``bodies``; returns the clock when the wait ended. The
    bodies are made before the wait, as a producer has its message ready when it decides to
    send: formatting them is the harness's work, and after the due time only the send call
    (and this call's return from the wait) runs, for every row alike."""
    started = wait_until(due, clock, sleep)
    if len(bodies) == 1:
        send(bodies[0])
    elif send_batch is None:
        for body in bodies:
            send(body)
    else:
        send_batch(bodies)
    return started


class Consumer:
    """Times (and in count mode checks) every message a receiver hands over (``handle(bodies)``), from the
    receive loop (``run``) or from a push client's callback thread."""

    def __init__(self, sc: Scenario, go_ns: int, *, clock: Callable[[], int] = time.monotonic_ns,
                 progress: Callable[[int], None] | None = None, threadsafe: bool = False,
                 verify: bool | None = None):
        self.sc = sc
        #: check length, padding and duplicates of every message (count mode by default, but
        #: for a pull backlog: timed runs measure, and the checks would cap every system at
        #: the consumer's pace)
        self.verify = (sc.count_mode and not sc.backlog) if verify is None else verify
        self.clock = clock
        self.progress = progress
        self.recorder = LatencyRecorder()
        self.warm_end = go_ns + (0 if sc.count_mode else int(sc.warmup * 1e9))
        self.window_end = None if sc.count_mode else go_ns + int((sc.warmup + sc.duration) * 1e9)
        self.window_start = self.warm_end
        self.received = self.in_window = self.duplicates = self.corrupt = 0
        self.first_ns = self.last_ns = 0
        self._pad = b"x" * (sc.size - HEADER.size)
        self._seen: list[bytearray] = []
        self._lock = threading.Lock() if threadsafe else None
        self.tail = open_log("consumer")  # bench/tail.py: (due, received) per window message

    def handle(self, bodies, now: int | None = None) -> None:
        """``now``: when the receiver got them, if it read the clock itself (a push client's
        listener, on entry: what it does to hand the bodies over is not the system's latency)."""
        if self._lock is not None:
            with self._lock:
                self._handle(bodies, now)
        else:
            self._handle(bodies, now)

    def _handle(self, bodies, now: int | None = None) -> None:
        if now is None:
            now = self.clock()
        warm_end = self.warm_end
        record = self.sc.records_latency
        add = self.recorder.add
        if self.verify:
            self._verify(bodies, now, warm_end, record, add)
        elif record:
            unpack = STAMP.unpack_from
            for body in bodies:
                stamp = unpack(body)[0]
                if stamp >= warm_end:
                    add(now - stamp)
            if self.tail is not None:
                self.tail.note_thread()
                rows = self.tail.rows
                for s in (unpack(b)[0] for b in bodies):
                    if s >= warm_end:
                        rows.extend((s, now))
        n = len(bodies)
        if not self.first_ns:
            self.first_ns = now
        self.last_ns = now
        self.received += n
        if now >= self.window_start and (self.window_end is None or now < self.window_end):
            self.in_window += n
        if self.progress is not None:
            self.progress(self.received)

    def _verify(self, bodies, now, warm_end, record, add) -> None:
        size, hs, pad = self.sc.size, HEADER.size, self._pad
        unpack = HEADER.unpack_from
        seen = self._seen
        for body in bodies:
            if len(body) != size or body[hs:] != pad:
                self.corrupt += 1
                continue
            stamp, p, seq = unpack(body)
            while p >= len(seen):
                seen.append(bytearray())
            s = seen[p]
            if seq >= len(s):
                s.extend(bytes(max(seq + 1 - len(s), len(s), 4096)))
            if s[seq]:
                self.duplicates += 1
                continue
            s[seq] = 1
            if record and stamp >= warm_end:
                add(now - stamp)

    def run(self, recv: Callable[[float], list], stop: Callable[[], bool]) -> None:
        """Receive until ``stop()``: ``recv(timeout_s)`` returns a list of bodies (maybe empty)."""
        handle = self.handle if self._lock is not None else self._handle
        maybe_fold = self.recorder.maybe_fold
        while not stop():
            bodies = recv(0.05)
            if bodies:
                handle(bodies)
                maybe_fold()

    def report(self) -> dict:
        if self._lock is not None:  # push threads may still deliver: fold under their lock
            with self._lock:
                return self._report()
        return self._report()

    def _report(self) -> dict:
        return {"received": self.received, "in_window": self.in_window, "duplicates": self.duplicates,
                "corrupt": self.corrupt, "first_ns": self.first_ns, "last_ns": self.last_ns,
                "histogram": self.recorder.encode()}
