"""The timer service: RocketMQ 5's timer wheel (TimerMessageStore), run by the supervisor,
which owns the store. One thread does everything the wheel does (shmq.store.timer_store):
ingest new timer records, fire what is due, settle and checkpoint, and roll timers out of a
CommitLog file the cleanup is about to delete.

Waiting: until the earliest due time, at most ``max_wait``, or until anything is appended
(the store's "new data" futex, so a short timer put by a worker or a local producer is seen
at once). A wake-up by data is followed by ``min_wait`` of sleep, so a busy store costs this
thread at most 1,000 passes a second, not one per append.
"""
from __future__ import annotations

import logging
import threading
import time

from shmq.store.timer_store import TimerStore

log = logging.getLogger("shmq.broker.timer")
ROLL_TIMEOUT_S = 30.0


class TimerService:
    def __init__(self, store, pipeline, *, checkpoint_interval: float = 1.0, max_wait: float = 0.05,
                 min_wait: float = 0.001, batch: int = 2048):
        self.store = store
        self.timers = TimerStore(store, pipeline.put_inner)
        self.checkpoint_interval = checkpoint_interval
        self.max_wait = max_wait
        self.min_wait = min_wait
        self.batch = batch
        self._rolls: list[list] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self.timers.open()
        add = getattr(self.store, "add_expiry_guard", None)
        if add is not None:
            add(self.guard)
        self._thread = threading.Thread(target=self._run, name="shmq-timer", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        t = self._thread
        if t is None:
            return
        self._stopping = True
        t.join(timeout)
        self._thread = None
        if t.is_alive():
            log.error("timer thread did not stop within %.1fs; the next start recovers from the CommitLog", timeout)
            return
        remove = getattr(self.store, "remove_expiry_guard", None)
        if remove is not None:
            remove(self.guard)
        try:
            self.store.flush()
            self.timers.checkpoint()
        except Exception:  # noqa: BLE001 - the next start recovers from the CommitLog tail
            log.exception("timer checkpoint at stop failed")
        self.timers.close()

    # ---- the loop ------------------------------------------------------------------------
    def _run(self) -> None:
        last_ck = time.monotonic()
        while not self._stopping:
            seen = self.store.commit_pos
            try:
                busy = self._pass()
                if time.monotonic() - last_ck >= self.checkpoint_interval:
                    last_ck = time.monotonic()
                    self.timers.checkpoint()
            except Exception:  # noqa: BLE001 - never let the wheel die; try again soon
                log.exception("timer pass failed")
                busy = False
                time.sleep(0.5)
            if not busy:
                self._wait(seen)

    def _pass(self) -> bool:
        ts = self.timers
        ts.ingest()
        busy = ts.fire_due(self.batch) >= self.batch
        ts.settle()
        self._serve_rolls()
        return busy

    def _wait(self, seen: int) -> None:
        nd = self.timers.index.next_due()
        wait = self.max_wait
        if nd is not None:
            wait = min(wait, max(0.0, (nd - self.timers.now()) / 1000.0))
        if wait <= 0:
            return
        if self.store.wait(seen, wait) != seen:
            time.sleep(self.min_wait)

    # ---- expiry ----------------------------------------------------------------------------
    def guard(self, phys_end: int) -> bool:
        """Called by the cleanup before the CommitLog below ``phys_end`` goes: returns True once
        every pending timer stored there has been re-appended and flushed."""
        if self._thread is None or self._stopping:
            return False
        req = [phys_end, threading.Event(), False]
        with self._lock:
            self._rolls.append(req)
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
