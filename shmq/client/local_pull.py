"""The local consumer's reader: one thread per attached broker store (``ConsumerCore`` starts
it) reads every queue the consumer holds on that broker straight from the mapped store
(``ConsumerCore._pull_local_once``) and, between reads, sleeps in one C call,
``shmq_wait_queues`` (native/core.c): it spins ``spin_s``, then sleeps on the store's "new
data" futex, and returns the index of a queue that has something new. Appends to queues this
consumer does not read are slept through inside that call, and the set of queues is built
again only when it changes (``ConsumerCore.local_changed``), so a wake-up for one message is one
C call, one read and the delivery: no Python pass over the assigned queues per append.

What is decided per queue stays here and is decided when the queue has data, as the pull loop
did before: a queue over the pull threshold waits for room (flow control: ``_room``, set by a
commit), a queue not locked (orderly) is left out until the set is looked at again, at most
LOOK_AGAIN_S later. Offsets, ordering and delivery are the core's (one queue read by one
thread, in order)."""
from __future__ import annotations

import logging
import time

from shmq.errors import StaleSegment
from shmq.native import ffi, lib

log = logging.getLogger("shmq.client.local")

LOOK_AGAIN_S = 0.05   # a queue left out (not locked, or full) is looked at again this soon
NOT_READY = (1 << 63) - 1
_TIMEOUT, _STALE, _CHANGED = -1, -2, -3


class _Queues:
    """The queues of one store the wait looks at: (ProcessQueue, QueueReader or None) per
    queue, and the C arrays of pointers to their published next_offset (NULL: the queue has no
    slot yet) and of the offsets read up to (NOT_READY: left out)."""

    __slots__ = ("entries", "next", "offs", "left_out", "full")

    def __init__(self, store, pqs: list):
        n = max(len(pqs), 1)
        self.next = ffi.new("int64_t *[]", n)
        self.offs = ffi.new("int64_t[]", n)
        self.left_out = self.full = False
        self.entries = []
        for i, pq in enumerate(pqs):
            w = watch(store, pq)
            self.entries.append((pq, w[2] if w is not None else None))
            self.next[i] = w[1] if w is not None else ffi.NULL
            self.offs[i] = pq.next_offset

    def leave_out(self, i: int) -> None:
        self.offs[i] = NOT_READY
        self.left_out = True


def watch(store, pq):
    """(store, pointer to the queue's next_offset, QueueReader), made once per attached store;
    None while the queue has no slot in it."""
    w = pq.watch
    if w is None or w[0] is not store:
        mq = pq.mq
        ptr = store.max_offset_watch(mq.topic, mq.queue_id)
        w = pq.watch = (store, ptr, store.queue_reader(mq.topic, mq.queue_id, mq.broker_name)) if ptr is not None else None
    return w


class LocalPuller:
    def __init__(self, core, broker: str):
        self.core = core
        self.broker = broker

    def run(self) -> None:
        """Attach, read until the store goes stale, re-attach; until the consumer stops."""
        core, broker = self.core, self.broker
        while core._running:
            try:
                link = core.links.get(broker)
            except Exception as e:  # the broker is down or restarting: try again shortly
                log.debug("local store of %s not attachable: %s", broker, e)
                link = None
            if link is None:
                time.sleep(0.2)
                continue
            try:
                self.rounds(link)
            except StaleSegment:
                pass
            except Exception:
                log.exception("local pull from %s failed", broker)
                time.sleep(0.5)
            core.links.invalidate(broker)  # the broker restarted: re-attach on the next round

    def rounds(self, link) -> None:
        """Wait for a queue with news, read it, deliver; returns when the store is stale."""
        core, store = self.core, link.store
        wait, ctl = lib.shmq_wait_queues, store.cb.ctl
        seen = ffi.new("int64_t[1]")
        pull, may_pull = core._pull_local_once, core._may_pull
        poke, spin, idle = core._local_poke, int(core.spin_s * 1e9), int(core.idle_wait_s * 1e9)
        qs, start, hold, poked, look_at = None, 0, -1, 0, 0.0
        while core._running:
            if qs is None or (qs.left_out and time.monotonic() >= look_at):
                poked = poke[0]  # read before the set is built: a change after it returns _CHANGED
                qs = _Queues(store, [p for p in list(core.pqs.values()) if p.mq.broker_name == self.broker])
                look_at, hold, seen[0] = time.monotonic() + LOOK_AGAIN_S, -1, store.commit_pos
                entries, offs = qs.entries, qs.offs
            timeout = 0 if qs.full else (min(idle, int(LOOK_AGAIN_S * 1e9)) if qs.left_out else idle)
            i = wait(ctl, qs.next, offs, len(entries), start, seen, hold, poke, poked, spin, timeout)
            if i < 0:
                if i == _STALE or not link.alive:
                    return
                if i == _TIMEOUT and qs.full:
                    # flow control: the data is there, the consumers are behind; wake when a
                    # commit makes room (commit() sets _room), not when more data comes
                    core._room.clear()
                    core._throttled = True
                    core._room.wait(0.05)
                qs = None
                continue
            pq, reader = entries[i]
            start = i + 1
            if pq.dropped or (reader is None and watch(store, pq) is not None):
                qs = None  # dropped, or its slot appeared: build the set again
                continue
            if len(pq.msgs) >= core.threshold:
                qs.leave_out(i)
                qs.full = True
                continue
            if not may_pull(pq):
                qs.leave_out(i)
                continue
            before = pq.next_offset
            pull(store, pq, reader)
            offs[i] = nxt = pq.next_offset
            # nothing read (the entry is published, its record not committed yet): this queue
            # counts as ready again only once the commit position moves past *seen
            hold = -1 if nxt != before else i
