"""The timer service: RocketMQ 5's timer wheel (TimerMessageStore), run by the supervisor,
which owns the store. One thread does everything the wheel does (shmq.store.timer_store):
ingest new timer records, fire what is due, settle and checkpoint, and roll timers out of a
CommitLog file the cleanup is about to delete.

Waiting: until the earliest due time, at most ``max_wait``, or until a record is appended
into the timer topic (the control block's timer futex, ``shmq_wait_timer``: the C append moves
it only for the timer topic's two queues, so a short timer put by a worker or a local producer
is seen at once, and the plain appends of a busy store wake this thread not at all; before, it
slept on the "new data" futex and woke up to 1,000 times a second, ~40 us of Python each, on
the two cores a local producer and consumer share with it). A wake-up by a timer append is
followed by ``min_wait`` of sleep, so a stream of timer messages costs at most 1,000 passes a
second. With nothing due sooner it sleeps ``max_wait`` (1 s, the checkpoint interval): stop,
wake and a cleanup's roll request end the sleep at once (``shmq_wake_timer``). It polled every
50 ms before, 20 wake-ups a second of an idle or plain-only store (~3 ms of CPU a second in the
TCP rows, bench/supervisor_cpu.py).
"""
from __future__ import annotations

import errno
import logging
import threading
import time

from shmq.native import lib
from shmq.service import ThreadService
from shmq.store.timer_store import TimerStore

log = logging.getLogger("shmq.broker.timer")
ROLL_TIMEOUT_S = 30.0


class TimerService(ThreadService):
    """A :class:`shmq.service.ThreadService` whose sleep is the store's new-data futex."""

    def __init__(self, store, pipeline, *, checkpoint_interval: float = 1.0, max_wait: float = 1.0,
                 min_wait: float = 0.001, batch: int = 2048):
        super().__init__("shmq-timer", max_wait, log=log, first_delay_s=0, error_delay_s=0.5)
        self.store = store
        self.timers = TimerStore(store, pipeline.put_inner)
        self.checkpoint_interval = checkpoint_interval
        self.max_wait = max_wait
        self.min_wait = min_wait
        self.batch = batch
        self._rolls: list[list] = []
        self._lock = threading.Lock()
        self._last_ck = 0.0
        self._seen = 0  # timer_seq loaded before the round's ingest (no timer append is missed)
        self._opened = False
        self._ck_held_back = False  # the checkpoint held back by a full disk (said once)

    def start(self) -> None:
        if self.running:
            return
        if not self._opened:
            self.timers.open()
            self._opened = True
        self.store.add_expiry_guard(self.guard)
        self._last_ck = time.monotonic()
        super().start()

    def stop(self, timeout: float = 10.0) -> bool:
        if not self.running:
            return True
        if not super().stop(timeout):
            log.error("timer thread did not stop within %.1fs; the next start recovers from the CommitLog", timeout)
            return False
        self.store.remove_expiry_guard(self.guard)
        try:
            self.store.flush()
            self.timers.checkpoint()
        except Exception:  # noqa: BLE001 - the next start recovers from the CommitLog tail
            log.exception("timer checkpoint at stop failed")
        self.timers.close()
        self._opened = False
        return True

    # ---- the round -------------------------------------------------------------------------
    def round(self) -> float:
        self._seen = self.store.cb.ctl.pos.timer_seq
        ts = self.timers
        ts.ingest()
        busy = ts.fire_due(self.batch) >= self.batch
        ts.settle()
        self._serve_rolls()
        if time.monotonic() - self._last_ck >= self.checkpoint_interval:
            self._last_ck = time.monotonic()
            self._checkpoint()
        if busy:
            return 0.0
        nd = ts.index.next_due()
        if nd is None:
            return self.max_wait
        return min(self.max_wait, max(0.0, (nd - ts.now()) / 1000.0))

    def _checkpoint(self) -> None:
        """A full disk holds the timer checkpoint back: said once, the old file stays whole
        (atomic replace), retried at the next interval; any other error propagates."""
        try:
            self.timers.checkpoint()
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if not self._ck_held_back:
                log.error("timer checkpoint not written: %s; retrying every %.0f s", e, self.checkpoint_interval)
            self._ck_held_back = True
            return
        if self._ck_held_back:
            self._ck_held_back = False
            log.warning("timer checkpoint written again: the disk has room")

    def sleep(self, seconds: float) -> None:
        if lib.shmq_wait_timer(self.store.cb.ctl, self._seen, int(seconds * 1e9)) != self._seen \
                and not self.stopping:
            time.sleep(self.min_wait)

    def interrupt(self) -> None:
        ctl = self.store.cb.ctl
        if ctl is not None:  # (None once the store is closed: a stop after it has nothing to end)
            lib.shmq_wake_timer(ctl)  # the sleep ends at once (its round finds nothing new)

    # ---- expiry ----------------------------------------------------------------------------
    def guard(self, phys_end: int) -> bool:
        """Called by the cleanup before the CommitLog below ``phys_end`` goes: returns True once
        every pending timer stored there has been re-appended and flushed."""
        if not self.running or self.stopping:
            return False
        req = [phys_end, threading.Event(), False]
        with self._lock:
            self._rolls.append(req)
        self.interrupt()  # served by the next round, now
        if not req[1].wait(ROLL_TIMEOUT_S):
            log.error("timer rolls below %d did not finish in %.0fs: the file is kept", phys_end, ROLL_TIMEOUT_S)
            return False
        return req[2]

    def _serve_rolls(self) -> None:
        if not self._rolls:
            return
        with self._lock:
            rolls, self._rolls = self._rolls, []
        for req in rolls:
            try:
                self.timers.ingest()
                n = self.timers.roll_below(req[0])
                self.store.flush()
                req[2] = True
                if n:
                    log.info("rolled %d pending timers out of the CommitLog below %d", n, req[0])
            except Exception:  # noqa: BLE001 - the file is kept; the next cleanup round asks again
                log.exception("timer roll below %d failed", req[0])
            req[1].set()

    def stats(self) -> dict[str, int]:
        return self.timers.stats()
