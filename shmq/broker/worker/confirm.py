"""The wait before a send is answered under SYNC_FLUSH or SYNC_MASTER, for a worker's event
loop: one thread per worker waits on the store's futexes for the smallest pending end
position and releases every pending send below the new flushed / replicated position at
once (group commit, RocketMQ's GroupCommitService / GroupTransferService). A thread per
send, as a thread pool gives, would cap the sends in flight at the pool's size.

A send's answer: None (confirmed), or the exception the store's own wait raises
(FlushDiskTimeout, ReplicationError), each after syncFlushTimeout at the latest.
"""
from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time

from shmq.errors import FlushDiskTimeout, FlushFailed, ReplicationError
from shmq.native import lib


class Confirmer:
    def __init__(self, store):
        self.store = store
        self.ctl = store.cb.ctl
        self.timeout_s = store._sync_timeout_ns / 1e9
        self._heap: list = []          # (end, seq, deadline, future, loop)
        self._seq = itertools.count()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shmq-confirm", daemon=True)
        self._thread.start()

    def wait(self, end: int) -> asyncio.Future:
        """A future that is done when everything below ``end`` is confirmed."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        p = self.ctl.pos
        if self.store.sync_master and p.repl_pos < end and (
                p.repl_slaves == 0 or end - p.repl_pos >= self.ctl.owner.ha_fallbehind_max):
            fut.set_exception(ReplicationError("slave not available", code=11))
            return fut
        with self._lock:
            heapq.heappush(self._heap, (end, next(self._seq), time.monotonic() + self.timeout_s, fut, loop))
        self._wake.set()
        return fut

    def _confirmed(self) -> int:
        p = self.ctl.pos
        pos = 2 ** 62
        if self.store.sync_flush:
            pos = min(pos, p.flushed_pos)
        if self.store.sync_master:
            pos = min(pos, p.repl_pos)
        return pos

    def _run(self) -> None:
        while True:
            with self._lock:
                top = self._heap[0] if self._heap else None
            if top is None:
                self._wake.wait()
                self._wake.clear()
                continue
            end, _, deadline, _, _ = top
            # slices of 50 ms at most, so a new send with an earlier deadline is not starved
            left = min(50_000_000, max(0, int((deadline - time.monotonic()) * 1e9)))
            rc = 0
            if self.store.sync_flush:
                rc = lib.shmq_wait_flushed(self.ctl, end, left)
            if rc == 0 and self.store.sync_master:
                rc = lib.shmq_wait_replicated(self.ctl, end, left)
            if rc not in (0, lib.SHMQ_ETIMEDOUT, lib.SHMQ_ESLAVE):
                time.sleep(0.005)  # fenced or read-only: the deadline answers them
            self._release()

    def _release(self) -> None:
        pos = self._confirmed()
        now = time.monotonic()
        lost = self._lost_slaves()
        # a failed flush (the store is read-only now) answers every waiting send at once
        broken = self.store.sync_flush and self.ctl.pos.io_error
        done = []
        with self._lock:
            h = self._heap
            while h and (h[0][0] <= pos or h[0][2] <= now or lost or broken):
                done.append(heapq.heappop(h))
        if not done:
            return
        # one wake-up of the event loop for every send released by this acknowledgement
        settled = [(fut, self._outcome(end, pos)) for end, _, _, fut, _ in done]
        done[0][4].call_soon_threadsafe(_settle_all, settled)

    def _lost_slaves(self) -> bool:
        return self.store.sync_master and self.ctl.pos.repl_slaves == 0

    def _outcome(self, end: int, pos: int):
        if end <= pos:
            return None
        if self.store.sync_flush and self.ctl.pos.flushed_pos < end:
            if self.ctl.pos.io_error:
                return FlushFailed()
            return FlushDiskTimeout(f"not flushed within {self.timeout_s * 1000:.0f} ms")
        if self._lost_slaves():
            return ReplicationError("slave not available (disconnected)", code=11)
        return ReplicationError(f"no slave confirmed within {self.timeout_s * 1000:.0f} ms", code=12)


def _settle_all(settled) -> None:
    for fut, exc in settled:
        _settle(fut, exc)


def _settle(fut: asyncio.Future, exc) -> None:
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)


__all__ = ["Confirmer"]
