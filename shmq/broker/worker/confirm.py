"""The wait before a send is answered under SYNC_FLUSH or SYNC_MASTER, for a worker's event
loop (group commit, RocketMQ's GroupCommitService / GroupTransferService).

A send is appended, then :meth:`Confirmer.add` queues ``(end, deadline, answer, arg)``; at the
end of that turn of the loop, once every send of the read is appended, one callback posts one
flush request for all of them (a C call that does not block) and arms the bridge: one msync
then covers the whole read, and the loop gives the GIL away once per turn, not per send (a
cffi call releases it, and the worker's other threads take it). The worker's
confirm bridge (``shmq_bridge_*`` in native/core_wait.c: one C thread, no GIL) waits on the store's
futexes for the oldest queued end and, once the flushed / replicated position passes it (or
its deadline, or the store cannot get there), writes to an eventfd the loop polls. The loop
then answers every queued send below the new position in that one callback: one wake-up
and, per connection, one write per group commit, with no task, coroutine or future per send.
A thread per send, as a thread pool gives, would cap the sends in flight at the pool's size.

The queue is in append order, which is end order: one event loop appends for this worker, so
its ends only grow, and every send has the same timeout, so deadlines only grow too. Were an
end ever out of order it would be answered late, never early: an answer is given only for an
end at or below the confirmed position (or as a failure).

An answer gets None (confirmed) or the exception the store's own wait raises
(FlushDiskTimeout, FlushFailed, ReplicationError), after syncFlushTimeout at the latest.
"""
from __future__ import annotations

import asyncio
import collections
import os
import time

from shmq.errors import FlushDiskTimeout, FlushFailed, ReplicationError
from shmq.native import ffi, lib


class Confirmer:
    def __init__(self, store, loop: asyncio.AbstractEventLoop):
        self.store = store
        self.ctl = store.cb.ctl
        self.timeout_ns = store._sync_timeout_ns
        self._queue: collections.deque = collections.deque()  # (end, deadline_ns, answer, arg)
        self._armed = False  # the bridge waits for the queue's first end, or has woken us for it
        self._loop = loop
        self._post_pending = False  # _post is scheduled for the end of this turn
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        modes = (1 if store.sync_flush else 0) | (2 if store.sync_master else 0)
        self._bridge = lib.shmq_bridge_start(self.ctl, self._fd, modes)
        if self._bridge == ffi.NULL:
            os.close(self._fd)
            raise OSError("cannot start the confirm thread")
        loop.add_reader(self._fd, self._woken)

    def add(self, end: int, answer, arg) -> None:
        """``answer(arg, outcome)`` from the loop once everything below ``end`` is confirmed
        (outcome None) or cannot be (outcome an exception). Called from the loop only."""
        p = self.ctl.pos
        if self.store.sync_master and p.repl_pos < end and (
                p.repl_slaves == 0 or end - p.repl_pos >= self.ctl.owner.ha_fallbehind_max):
            answer(arg, ReplicationError("slave not available", code=11))
            return
        self._queue.append((end, time.monotonic_ns() + self.timeout_ns, answer, arg))
        if not self._post_pending:
            self._post_pending = True
            self._loop.call_soon(self._post)

    def _post(self) -> None:
        """End of the turn: one flush request up to the last queued end, and the bridge armed."""
        self._post_pending = False
        q = self._queue
        if not q or self._closed():
            return
        if self.store.sync_flush:
            lib.shmq_wait_flushed(self.ctl, q[-1][0], 0)  # the flush request; never blocks
        if not self._armed:
            self._arm()

    def _arm(self) -> None:
        end, deadline = self._queue[0][0], self._queue[0][1]
        self._armed = True
        lib.shmq_bridge_arm(self._bridge, end, deadline)

    def _confirmed(self) -> int:
        p = self.ctl.pos
        pos = 2 ** 62
        if self.store.sync_flush:
            pos = min(pos, p.flushed_pos)
        if self.store.sync_master:
            pos = min(pos, p.repl_pos)
        return pos

    def _woken(self) -> None:
        """The bridge's wake-up: answer every queued send the confirmed position covers, or
        whose deadline passed, all in this one callback; then arm for the next."""
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            return
        if self._closed():
            return
        self._armed = False
        pos = self._confirmed()
        now = time.monotonic_ns()
        # lost slaves or a failed flush (the store is read-only now) answer every waiting send
        every = self._lost_slaves() or bool(self.store.sync_flush and self.ctl.pos.io_error)
        q = self._queue
        try:
            while q and (q[0][0] <= pos or q[0][1] <= now or every):
                end, _, answer, arg = q.popleft()
                answer(arg, self._outcome(end, pos))
        finally:
            if q:
                self._arm()

    def _closed(self) -> bool:
        """The store was closed: its control block is unmapped and ``self.ctl`` points into the
        hole (a read is SIGSEGV: a worker's loop still runs callbacks after its shutdown closed
        the store, asyncio.Runner's own clean-up, and a SYNC_FLUSH test worker died so). The
        reader goes and the queued sends get no answer: their connections are closed by then.
        The bridge thread was ended by the close (shmq_helpers_stop); its eventfd stays open,
        as pull_hold.py's does, so no later file takes its number."""
        if self.store.cb.ctl is not None:
            return False
        self._queue.clear()
        try:
            self._loop.remove_reader(self._fd)
        except (RuntimeError, ValueError):  # the loop is closed already
            pass
        return True

    def _lost_slaves(self) -> bool:
        return self.store.sync_master and self.ctl.pos.repl_slaves == 0

    def _outcome(self, end: int, pos: int):
        if end <= pos:
            return None
        if self.store.sync_flush and self.ctl.pos.flushed_pos < end:
            if self.ctl.pos.io_error:
                return FlushFailed()
            return FlushDiskTimeout(f"not flushed within {self.timeout_ns // 1_000_000} ms")
        if self._lost_slaves():
            return ReplicationError("slave not available (disconnected)", code=11)
        return ReplicationError(f"no slave confirmed within {self.timeout_ns // 1_000_000} ms", code=12)


__all__ = ["Confirmer"]
