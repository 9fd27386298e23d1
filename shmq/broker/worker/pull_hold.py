"""Long polling: pulls with nothing to return, parked until their queue grows or they time out.

Whoever appends (any worker, a local producer, the supervisor's delay service) advances the
store's commit position and wakes the store futex. One thread per worker sleeps in
``store.wait()`` (the GIL is released there) while holds exist, and on every advance
schedules one check on the event loop (coalesced: at most one pending at a time). The
check calls back each hold whose queue's max offset passed the offset it waits for (the
pull processor re-runs the read and writes the answer from there); a hold whose time is up
is called back by its timer. A hold's callback runs once, on the loop.

No lost wake-up: a hold is checked once right after it is registered (on the loop), and
when the thread goes from idle to waiting it reads the commit position and then schedules
a check, so a commit between a pull's first look and the thread's first futex wait is
still seen by some check.

A send served by this worker checks the holds itself, on the loop, right after its append
(:meth:`appended`): its own held pulls are answered with no thread hop, in the callback
after the send's answer. It records the commit position it read
*before* that check, and the thread schedules no check of its own for a position at or below
it (every commit up to it was seen by the loop's check), which saves the self-pipe write and
a wake-up of the loop per message while a consumer is caught up.

With ``own_bit`` (the worker's id) the thread is not even woken by this worker's own appends:
the process takes that futex wake bit (``MessageStore.take_wake_bit``) and the thread sleeps
in ``store.wait_others``, which every other appender still wakes. So while the producer and
the consumer are on the same worker, a message costs no wake-up of this thread and no GIL
hand-over to it. Every append of the worker must then call :meth:`appended` (the send, batch,
send-back, end-transaction, recall and reply paths do); one that did not would still be seen
at the end of the thread's current wait slice (``WAIT_SLICE_S``), never lost.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Callable

log = logging.getLogger("shmq.broker.pull")

WAIT_SLICE_S = 0.2  # the thread's longest sleep (it looks at _stop and the holds between)


class _Hold:
    __slots__ = ("topic", "qid", "offset", "ready", "owner", "timer")

    def __init__(self, topic: str, qid: int, offset: int, ready: Callable[[bool], None], owner):
        self.topic, self.qid, self.offset, self.ready, self.owner = topic, qid, offset, ready, owner
        self.timer: asyncio.TimerHandle | None = None


class PullHolds:
    def __init__(self, store, loop: asyncio.AbstractEventLoop, own_bit: int | None = None):
        self.store = store
        self.loop = loop
        self._wait = store.wait
        if own_bit is not None and 0 <= own_bit < 32:
            store.take_wake_bit(own_bit)
            self._wait = store.wait_others
        self._holds: set[_Hold] = set()
        self._active = threading.Event()   # set while holds exist: the thread waits on the store
        self._stop = False
        self._check_pending = False
        self._loop_seen = -1               # commit position covered by the loop's last own check
        self._thread = threading.Thread(target=self._run, name="pull-wake", daemon=True)
        self._thread.start()

    def __len__(self) -> int:
        return len(self._holds)

    def hold(self, topic: str, qid: int, offset: int, timeout_s: float, ready: Callable[[bool], None],
             owner=None) -> None:
        """On the loop: call ``ready(True)`` once queue (topic, qid) holds an entry at
        ``offset``, or ``ready(False)`` after ``timeout_s`` (or at shutdown). A hold whose
        ``owner`` (the connection) is closed is dropped at the next check, not called."""
        if self.store.max_offset(topic, qid) > offset:  # the check right after registering
            ready(True)
            return
        h = _Hold(topic, qid, offset, ready, owner)
        h.timer = self.loop.call_later(timeout_s, self._release, h, False)
        self._holds.add(h)
        self._active.set()

    def _release(self, h: _Hold, grew: bool) -> None:
        if h not in self._holds:
            return
        self._holds.discard(h)
        h.timer.cancel()
        if getattr(h.owner, "closed", False):
            return
        try:
            h.ready(grew)
        except Exception:  # noqa: BLE001 - one pull's failure must not stop the others' answers
            log.exception("answering a held pull of %s-%d failed", h.topic, h.qid)

    def appended(self) -> None:
        """On the loop, after this worker appended: answer the holds its append satisfied,
        in the next callback of the loop (the send's own answer is written first)."""
        if self._holds:
            self._loop_seen = self.store.commit_pos  # read before the check: see the docstring
            if not self._check_pending:
                self._check_pending = True
                self.loop.call_soon(self.check)

    def check(self) -> None:
        """On the loop: call back every hold whose queue grew (and drop closed ones)."""
        self._check_pending = False
        max_offset = self.store.max_offset
        for h in list(self._holds):
            if max_offset(h.topic, h.qid) > h.offset or getattr(h.owner, "closed", False):
                self._release(h, True)

    def release_all(self) -> None:
        """Shutdown: answer every held pull now (it re-runs and answers what it finds)."""
        for h in list(self._holds):
            self._release(h, False)

    def _schedule_check(self) -> None:
        if self._check_pending:
            return
        self._check_pending = True
        try:
            self.loop.call_soon_threadsafe(self.check)
        except RuntimeError:  # loop closed: shutting down
            self._stop = True

    def _run(self) -> None:
        store = self.store
        while not self._stop:
            if not self._holds:
                self._active.clear()
                if not self._holds:
                    self._active.wait(0.5)
                continue
            seen = store.commit_pos
            self._schedule_check()
            while self._holds and not self._stop:
                try:
                    pos = self._wait(seen, WAIT_SLICE_S)
                except Exception:  # the store closed under us (shutdown)
                    log.debug("pull-wake thread: store wait failed", exc_info=True)
                    return
                if pos != seen:
                    seen = pos
                    if pos > self._loop_seen:
                        self._schedule_check()

    def close(self) -> None:
        self._stop = True
        self._active.set()
        self.release_all()
        self._thread.join(2.0)
