"""The local consumer's reader: one thread per attached broker store (``ConsumerCore`` starts
it) reads every queue the consumer holds on that broker straight from the mapped store
(``ConsumerCore._pull_local_once``) and, between reads, sleeps in one C call,
``shmq_wait_queues`` (native/core_wait.c): it spins ``spin_s`` (the first 200 µs with the GIL when
this thread runs the listener itself, ``consume_threads=0``: native/hot_wait.c's ``wait_read``), then
sleeps on the store's "new data" futex (without it), and returns the index of a queue that has
something new. Appends to queues this
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
from array import array

from shmq.errors import StaleSegment
from shmq.native import ffi, wait_read

log = logging.getLogger("shmq.client.local")

LOOK_AGAIN_S = 0.05   # a queue left out (not locked, or full) is looked at again this soon
NOT_READY = (1 << 63) - 1
_TIMEOUT, _STALE, _CHANGED = -1, -2, -3


class _Queues:
    """The queues of one store the wait looks at: (ProcessQueue, QueueReader or None) per
    queue, the C arrays of pointers to their published next_offset (NULL: the queue has no
    slot yet) and of the offsets read up to (NOT_READY: left out), and per queue the reader
    state ``wait_read`` reads it with (None: this queue is read by the pull, not in C)."""

    __slots__ = ("entries", "next", "offs", "states", "addrs", "left_out", "full", "absent")

    def __init__(self, store, pqs: list, plain: dict):
        n = max(len(pqs), 1)
        self.next = ffi.new("int64_t *[]", n)
        # an array.array, not a cffi array: the wake-up reads and writes its item, and a cffi
        # item costs ~5x more; never resized, so its buffer's address stays valid
        self.offs = array("q", bytes(8 * n))
        self.left_out = self.full = self.absent = False
        self.entries, self.states = [], [None] * n
        for i, pq in enumerate(pqs):
            w = watch(store, pq)
            reader = w[2] if w is not None else None
            self.entries.append((pq, reader))
            self.next[i] = w[1] if w is not None else ffi.NULL
            self.absent |= w is None
            self.offs[i] = pq.next_offset
            if reader is not None and plain.get(pq.mq.topic):
                self.states[i] = reader.st
        self.addrs = (_addr(self.next), self.offs.buffer_info()[0])

    def leave_out(self, i: int) -> None:
        self.offs[i] = NOT_READY
        self.left_out = True


def _addr(p) -> int:
    return int(ffi.cast("uintptr_t", p))


def watch(store, pq):
    """(store, pointer to the queue's next_offset, QueueReader), made once per attached store;
    None while the queue has no slot in it."""
    w = pq.watch
    if w is None or w[0] is not store:
        mq = pq.mq
        ptr = store.max_offset_watch(mq.topic, mq.queue_id)
        w = pq.watch = (store, ptr, store.queue_reader(mq.topic, mq.queue_id, mq.broker_name)) if ptr is not None else None
    return w


class _Round:
    """One attached store's pull loop state (``LocalPuller.rounds``): the addresses the wait
    reads, the queue set, where the next wait starts and which queue it holds."""

    __slots__ = ("core", "link", "store", "broker", "seen", "ctl", "seen_at", "poke", "poke_at", "batch",
                 "spin", "idle", "short", "qs", "start", "hold", "poked", "look_at", "next_at", "offs_at", "n", "keep",
                 "threshold", "gated", "deliver")

    def __init__(self, puller, link):
        core, store = puller.core, link.store
        self.core, self.link, self.store, self.broker = core, link, store, puller.broker
        self.seen = ffi.new("int64_t[1]")
        self.ctl, self.seen_at, self.poke = _addr(store.cb.ctl), _addr(self.seen), core._local_poke
        self.poke_at, self.batch = _addr(self.poke), core.pull_batch_size
        self.spin, self.idle = int(core.spin_s * 1e9), int(core.idle_wait_s * 1e9)
        self.keep = core._spin_keeps_gil  # the spin keeps the GIL (this thread runs the listener)
        # the core's settings a wake-up reads, fixed once the consumer has started (this thread
        # is started after): read here from this object's slots, which the wait's own
        # arguments have just brought into the cache, not from the core's __dict__, cold after
        # a sleep (RESULTS, "Session 11, local11": ~2.4 us from wait_read's return to the
        # listener's frame at 10,000 msgs/s)
        self.threshold, self.gated, self.deliver = core.threshold, core._gated, core._local_deliver
        self.short = min(self.idle, int(LOOK_AGAIN_S * 1e9))  # the wait while a queue is left out or absent
        self.qs, self.start, self.hold, self.poked, self.look_at = None, 0, -1, 0, 0
        self.next_at = self.offs_at = self.n = 0

    def build(self) -> _Queues:
        core, store = self.core, self.store
        self.poked = self.poke[0]  # read before the set is built: a change after it returns _CHANGED
        qs = self.qs = _Queues(store, [p for p in list(core.pqs.values()) if p.mq.broker_name == self.broker],
                               core._local_plain)
        self.look_at, self.hold, self.seen[0] = time.monotonic_ns() + int(LOOK_AGAIN_S * 1e9), -1, store.commit_pos
        (self.next_at, self.offs_at), self.n = qs.addrs, len(qs.entries)
        return qs

    def turn(self) -> bool:
        """One wait and what it answers; False once the consumer stops or the store is stale."""
        if not self.core._running:
            return False
        qs = self.qs
        if qs is None:
            qs = self.build()
        # a queue left out, or one without a slot (the wait answers it only when nothing
        # else has news), is looked at again by building the set, at most LOOK_AGAIN_S late:
        # the wait answers _CHANGED when it starts after look_at (its own clock reading: a
        # Python one here cost a wake-up ~0.15-0.4 us on this VM, RESULTS "Session 11, local11")
        if qs.left_out or qs.absent:
            look, timeout = self.look_at, (0 if qs.full else self.short)
        else:
            look, timeout = 0, (0 if qs.full else self.idle)
        i, read = wait_read(self.ctl, self.next_at, self.offs_at, self.n, self.start, self.seen_at, self.hold,
                            self.poke_at, self.poked, self.spin, timeout, qs.states, self.batch, self.keep, look)
        if i < 0:
            if i == _STALE or not self.link.alive:
                return False
            if i == _TIMEOUT and qs.full:
                # flow control: the data is there, the consumers are behind; wake when a
                # commit makes room (commit() sets _room), not when more data comes
                core = self.core
                core._room.clear()
                core._throttled = True
                core._room.wait(0.05)
            self.qs = None
            return True
        self.start = i + 1
        # Queue i has news (``read``: what wait_read already read of it, or None): deliver it
        # if it may be now; ``hold`` is the queue the wait holds next (below), or None: build
        # the set again (the queue was dropped, or its slot appeared). Here, not in a method of
        # its own: a Python call per wake-up is ~400 instructions of the ~22,000 of one.
        pq, reader = qs.entries[i]
        hold = self.hold
        if reader is None:  # no slot when the set was built: has it one now?
            hold = None if pq.dropped or watch(self.store, pq) is not None else hold
        elif pq.dropped:
            hold = None
        elif pq.count >= self.threshold:
            qs.leave_out(i)
            qs.full = True
        elif self.gated and not self.core._may_pull(pq):
            qs.leave_out(i)
        else:
            before = pq.next_offset
            msgs = None
            if read is not None and before == qs.offs[i]:
                msgs, nxt, elsewhere = read
                if elsewhere != -1:
                    msgs, nxt = reader.read_on(msgs, nxt, elsewhere, self.batch)
            if msgs:  # the common wake-up: read in C by wait_read, no second look at the queue
                pq.next_offset = nxt
                self.deliver(pq, msgs)  # puts them in pq (or consumes them inline)
            else:  # wait_read did not read it, or found nothing: the pull decides (get_messages)
                self.core._pull_local_once(self.store, pq, reader)
            qs.offs[i] = nxt = pq.next_offset
            # nothing read (the entry is published, its record not committed yet): this queue
            # counts as ready again only once the commit position moves past *seen
            hold = -1 if nxt != before else i
        self.hold = hold
        if hold is None:
            self.qs = None  # dropped, or its slot appeared: build the set again
        return True


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
        """Wait for a queue with news, read it, deliver; returns when the store is stale.
        One call of ``_Round.turn`` per wake-up, not a loop body here: CPython 3.11 specializes
        a function's bytecode when the function is called, never inside a loop that goes on, so
        a body inlined here ran unspecialized for the thread's life (~10 attribute reads per
        wake-up through the generic lookup, ~2,500 instructions)."""
        turn = _Round(self, link).turn
        while turn():
            pass
