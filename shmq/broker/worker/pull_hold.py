"""Long polling: pulls with nothing to return, parked until their queue grows or they time out.

Whoever appends (any worker, a local producer, the supervisor's delay service) advances the
store's commit position and wakes the store futex. A check on the event loop calls back each
hold whose queue's max offset passed the offset it waits for (the pull processor re-runs the
read and writes the answer from there); a hold whose time is up is called back by the expiry
sweep: one loop timer at the earliest deadline among the holds (held pulls mostly share one
timeout, so a new hold rarely moves it: no timer is made or cancelled per pull).
A hold's callback runs once, on the loop. Two things schedule the check:

* this worker's own appends: every append of the worker calls :meth:`appended` on the loop
  (the send, batch, send-back, end-transaction, recall and reply paths), which checks in the
  next callback, after the send's own answer is written, with no thread hop; the C send path
  (send_fast.py) writes its answers and then checks in the same read (:meth:`appended_in_read`);
* everybody else's: a small C thread (``shmq_pullwake_*`` in native/core_wait.c, no GIL) sleeps on
  the data futex while holds exist and writes an eventfd the loop reads. The worker takes its
  own futex wake bit (``shmq_set_data_wake_bit``) and that thread sleeps with every bit but
  it, so the worker's own appends do not wake it (the loop looked already) while every other
  appender's do. With the producer and the consumer on one worker a message costs no wake-up
  beyond the two requests; on two workers it costs one wake-up of the loop, and no GIL
  hand-over to a Python thread.

No lost wake-up: a hold is checked right after it is registered (``hold``), and the thread is
armed with a commit position read before that look; it reports any position past the one it
last reported, and a report is written only after the position was published.
"""
from __future__ import annotations

import asyncio
import logging
import os
from typing import Callable

from shmq.native import RemotingSends, ffi, lib

log = logging.getLogger("shmq.broker.pull")
_load = lib.shmq_load_i64
_due = RemotingSends.due  # the check's scan (native/remoting_pull.c)
_FIND = int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_queue_find")))  # (its look for an unknown queue)


class _Hold:
    """One held pull. ``ready(hold, grew)`` answers it: a :meth:`PullHolds.hold` callback through
    ``_call_back``, the C path's holds (:meth:`PullHolds.hold_fast`) straight through their
    answerer, one Python call per answer. ``owner``: the connection (``_NOBODY`` when none)."""
    __slots__ = ("topic", "qid", "offset", "ready", "owner", "deadline", "watch", "addr", "cb", "info", "tb")

    def __init__(self, topic: str, qid: int, offset: int, ready, owner, watch, addr: int, deadline: float):
        self.topic, self.qid, self.offset, self.ready, self.owner = topic, qid, offset, ready, owner
        self.watch = watch  # the queue's published max offset (a pointer), or None: unknown queue
        self.addr = addr  # the same as an int (0: unknown), for the C scan
        self.deadline = deadline  # the loop's clock


class _Nobody:
    """The owner of a hold made with none: never closed, never in a read (``check`` asks)."""
    closed = False

    def defer_flush(self) -> bool:
        return False


_NOBODY = _Nobody()
_NO_WATCH = (None, 0)


def _call_back(h: _Hold, grew: bool) -> None:
    h.cb(grew)


class PullHolds:
    def __init__(self, store, loop: asyncio.AbstractEventLoop, own_bit: int | None = None,
                 peer_fds: dict[int, int] | None = None):
        """``own_bit``: this worker's id; its appends then do not wake the bridge (see above).
        Only for a process whose every append calls :meth:`appended`. ``peer_fds``: every
        worker's eventfd by id (the supervisor's, :func:`peer_fds`), this one's included: the
        other workers' appends then write this worker's eventfd themselves, and this worker's
        theirs, while it holds pulls (no pull-wake thread in between; layout.h ``pull_armed``)."""
        self.store = store
        self.loop = loop
        self._own_bit = own_bit is not None and 0 <= own_bit < 32
        self._bit = own_bit if self._own_bit else -1
        self._peers = bool(self._own_bit and peer_fds and own_bit in peer_fds)
        if self._own_bit:
            lib.shmq_set_data_wake_bit(own_bit)
            os.register_at_fork(after_in_child=_child_wakes_everyone)
        if self._peers:
            lib.shmq_set_pull_peers(ffi.new("int[32]", [peer_fds.get(b, -1) for b in range(32)]), 32)
            lib.shmq_pull_armed(store.cb.ctl, own_bit, 0)  # (a restarted worker's bits: cleared)
            lib.shmq_pull_signal_clear(store.cb.ctl, own_bit)
        self._holds: set[_Hold] = set()
        # per queue: its published max offset (a cffi pointer) and the same as an int (the C scan's)
        self._watches: dict[tuple[str, int], tuple[object, int]] = {}
        self._ctl = int(ffi.cast("uintptr_t", store.cb.ctl))  # (the scan's, for an unknown queue's look)
        self._sweep: asyncio.TimerHandle | None = None  # the expiry sweep, at _sweep_at
        self._sweep_at = 0.0
        self._check_pending = False
        self._armed = False
        # the supervisor's eventfd (shared with the other workers' appends) or one of its own
        self._fd = peer_fds[own_bit] if self._peers else os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._bridge = lib.shmq_pullwake_start(store.cb.ctl, self._fd)
        if self._bridge == ffi.NULL:
            if not self._peers:
                os.close(self._fd)
            raise OSError("cannot start the pull-wake thread")
        loop.add_reader(self._fd, self._woken)

    def __len__(self) -> int:
        return len(self._holds)

    def _pair(self, topic: str, qid: int) -> tuple[object, int]:
        """(pointer, address) of the queue's published max offset; (None, 0) while it does not exist."""
        p = self._watches.get((topic, qid))
        if p is None:
            w = self.store.max_offset_watch(topic, qid)
            if w is None:
                return _NO_WATCH
            # a queue's slot never moves while the store is attached
            p = self._watches[(topic, qid)] = (w, int(ffi.cast("uintptr_t", w)))
        return p

    def _watch(self, topic: str, qid: int):
        return self._pair(topic, qid)[0]

    def max_offset(self, topic: str, qid: int) -> int:
        """The queue's published max offset (``store.max_offset``) in one C load through a
        pointer cached per queue (``store.max_offset_watch``)."""
        w = self._watch(topic, qid)
        return _load(w) if w is not None else self.store.max_offset(topic, qid)

    def hold(self, topic: str, qid: int, offset: int, timeout_s: float, ready: Callable[[bool], None],
             owner=None) -> None:
        """On the loop: call ``ready(True)`` once queue (topic, qid) holds an entry at
        ``offset``, or ``ready(False)`` after ``timeout_s`` (or at shutdown). A hold whose
        ``owner`` (the connection: ``closed``, ``defer_flush``, ``flush``) is closed is dropped
        at the next check, not called."""
        if not self._armed:  # the position before the look below: nothing after it is missed
            self._arm()
        watch, addr = self._pair(topic, qid)
        if (_load(watch) if watch is not None else self.store.max_offset(topic, qid)) > offset:
            ready(True)  # the check right after registering
            return
        h = _Hold(topic, qid, offset, _call_back, _NOBODY if owner is None else owner, watch, addr,
                  self.loop.time() + timeout_s)
        h.cb = ready
        if watch is None:
            h.tb = topic.encode()
        self._holds.add(h)
        if self._sweep is None or h.deadline < self._sweep_at:
            self._sweep_after(h.deadline)

    def hold_fast(self, conn, held: list, most_ms: int, answer) -> None:
        """:meth:`hold` for the pulls the worker's C path held in one read of ``conn``
        (pull_fast.py): each record is (the learnt (topic, queue id, reader state), offset,
        suspendTimeoutMillis, maxMsgNums, opaque), the timeout cut at ``most_ms``. Once, as for
        :meth:`hold`, ``answer(hold, grew)`` answers each: the hold carries ``owner`` (conn),
        ``topic``, ``qid``, ``offset`` and ``info`` (the record). The same guarantees (the look
        right after registering, the sweep, a closed owner dropped)."""
        if not self._armed:
            self._arm()
        now = self.loop.time()
        holds, watches = self._holds, self._watches
        for rec in held:
            info, offset, timeout = rec[0], rec[1], rec[2]
            topic, qid = info[0], info[1]
            watch, addr = watches.get((topic, qid)) or self._pair(topic, qid)
            h = _Hold(topic, qid, offset, answer, conn, watch, addr,
                      now + (timeout if timeout < most_ms else most_ms) / 1000.0)
            h.info = rec
            if watch is None:  # (a learnt queue exists: not seen)
                h.tb = topic.encode()
            elif _load(watch) > offset:
                answer(h, True)  # the check right after registering
                continue
            holds.add(h)
            if self._sweep is None or h.deadline < self._sweep_at:
                self._sweep_after(h.deadline)

    def _arm(self) -> None:
        self._armed = True
        lib.shmq_pullwake_arm(self._bridge, self.store.commit_pos, 1)
        if self._peers:  # and the other workers' appends write our eventfd from now on
            lib.shmq_pull_armed(self.store.cb.ctl, self._bit, 1)

    def _release(self, h: _Hold, grew: bool) -> None:
        try:
            self._holds.remove(h)
        except KeyError:  # (answered already)
            return
        if h.owner.closed:
            return
        try:
            h.ready(h, grew)
        except Exception:  # noqa: BLE001 - one pull's failure must not stop the others' answers
            log.exception("answering a held pull of %s-%d failed", h.topic, h.qid)

    def appended(self) -> None:
        """On the loop, after this worker appended: answer the holds its append satisfied,
        in the next callback of the loop (the send's own answer is written first)."""
        if self._holds and not self._check_pending:
            self._check_pending = True
            self.loop.call_soon(self.check)

    def appended_in_read(self, conn, answers: bytes | None) -> bool:
        """As :meth:`appended`, for the C send path in a read of ``conn`` (send_fast.py) with
        the ``answers`` it built: when pulls are held, the answers are written and everything
        ``conn`` has coalesced leaves first, then the holds are checked in this callback, not
        the next, which saves the loop a turn (a select and a callback) per message when the
        producer and the consumer share a worker. True when it wrote ``answers``."""
        if not self._holds:
            return False
        if answers is not None:
            conn.write_frame(answers)
        conn.flush_now()
        self.check()
        return True

    def _woken(self) -> None:
        """The bridge or another worker saw someone else's append (on the loop)."""
        try:
            os.eventfd_read(self._fd)
        except BlockingIOError:
            pass
        if self._peers:  # after the read (a write before it is consumed) and before the look below:
            lib.shmq_pull_signal_clear(self.store.cb.ctl, self._bit)  # an append after this writes again
        if not self._holds:
            # disarmed while nothing is held (re-armed by the next hold); a hold between now
            # and then is looked at when it is registered
            self._disarm()
            return
        self.check()

    def _disarm(self) -> None:
        self._armed = False
        lib.shmq_pullwake_arm(self._bridge, 0, 0)
        if self._peers:
            lib.shmq_pull_armed(self.store.cb.ctl, self._bit, 0)

    def check(self) -> None:
        """On the loop: call back every hold whose queue grew (and drop closed ones). The answers
        of one connection leave in one write (``defer_flush``) after every hold was looked at.
        The holds are scanned in C (``_due``: the queue grew, the owner closed, or the queue was
        unknown and is there now), then looked at and called here."""
        self._check_pending = False
        holds = self._holds
        due = _due(holds, _FIND, self._ctl) if holds else None
        if due is None:
            return
        answered = {}  # connections whose answers are written at the end, one write each
        for h in due:
            if h not in holds:  # (answered by an earlier callback of this loop)
                continue
            conn = h.owner
            if h.watch is None and self._unknown(h) <= h.offset and not conn.closed:
                continue  # (its queue is still not there, or has not grown)
            if not conn.closed and conn not in answered:
                answered[conn] = conn.defer_flush()
            self._release(h, True)  # (dropped, not called, when its owner is closed)
        for conn, deferred in answered.items():
            if deferred:  # False: in its own read, which flushes
                conn.flush()

    def _unknown(self, h: _Hold) -> int:
        """The max offset of a hold's queue that did not exist when it was held (a consumer's
        %RETRY% queue, mostly; the scan looks it up by ``tb``, its name as UTF-8, set when held):
        0 until the queue is made; then its watch is kept on the hold."""
        w, addr = self._pair(h.topic, h.qid)
        if w is None:
            return 0
        h.watch, h.addr = w, addr
        return _load(w)

    def _sweep_after(self, at: float) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
        self._sweep_at = at
        self._sweep = self.loop.call_at(at, self._expire)

    def _expire(self) -> None:
        """The sweep: answer the holds whose time is up, then wait for the next deadline."""
        self._sweep = None
        now = self.loop.time()
        nxt = None
        for h in list(self._holds):
            if h.deadline <= now:
                self._release(h, False)
            elif nxt is None or h.deadline < nxt:
                nxt = h.deadline
        if nxt is not None and (self._sweep is None or nxt < self._sweep_at):
            self._sweep_after(nxt)

    def release_all(self) -> None:
        """Shutdown: answer every held pull now (it re-runs and answers what it finds)."""
        for h in list(self._holds):
            self._release(h, False)

    def close(self) -> None:
        """Answer every hold and stop listening. The C thread stays (disarmed, asleep) until
        the process exits, and so does its eventfd: closing it could hand its number to
        another file the thread would then write to. This process's appends wake every
        sleeper again."""
        self.release_all()
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if self._armed:
            self._disarm()
        try:
            self.loop.remove_reader(self._fd)
        except (RuntimeError, ValueError):  # the loop is closed already
            pass
        if self._own_bit:
            lib.shmq_set_data_wake_bit(-1)


def peer_fds(env: str | None) -> dict[int, int] | None:
    """The supervisor's ``SHMQ_PULL_WAKE_FDS`` (``id:fd,...``): every worker's eventfd by id."""
    if not env:
        return None
    return {int(w): int(fd) for w, fd in (pair.split(":") for pair in env.split(","))}


def _child_wakes_everyone() -> None:
    # a forked child is another appender: its appends must wake this worker's bridge
    lib.shmq_set_data_wake_bit(-1)
