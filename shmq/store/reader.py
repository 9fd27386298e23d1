"""Reading the store: a queue from a queue offset (RocketMQ's getMessage, with its status
table), a record by physical offset, queue bounds, offset by time. Zero-copy: messages come
back as memoryviews into the CommitLog mapping.

Visibility invariant: a queue entry is used only when its queue offset is below the queue's
published next offset AND its record ends at or before the commit position, both read
with acquire loads; so a reader never sees a half-written record, whatever writer died.
"""
from __future__ import annotations

import struct
from dataclasses import dataclass, field
from enum import Enum

from shmq.message.layout import R_STORETS
from shmq.native import ffi, lib, read_queue, read_raw


_I64 = struct.Struct(">q")

MAX_SCAN_ENTRIES = 16000  # entries a filtered pull may pass over (maxFilterMessageCount)


class GetStatus(str, Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"
    MESSAGE_WAS_REMOVING = "MESSAGE_WAS_REMOVING"
    OFFSET_FOUND_NULL = "OFFSET_FOUND_NULL"
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    NO_MATCHED_LOGIC_QUEUE = "NO_MATCHED_LOGIC_QUEUE"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass
class GetResult:
    status: GetStatus
    next_begin_offset: int
    min_offset: int
    max_offset: int
    messages: list = field(default_factory=list)       # memoryviews of whole records
    queue_offsets: list = field(default_factory=list)  # the queue offset of each message
    scanned: int = 0


class Reader:
    """Mixed into MessageStore; needs self.cb, self.queues, self.commitlog, self.cfg."""

    def __init__(self):
        self._slot_cache: dict[tuple[str, int], int] = {}

    # ---- queues -------------------------------------------------------------------------
    def _find_slot(self, topic: str, queue_id: int) -> int:
        key = (topic, queue_id)
        s = self._slot_cache.get(key)
        if s is None:
            t = topic.encode()
            s = lib.shmq_queue_find(self.cb.ctl, t, len(t), queue_id)
            if s < 0:
                return -1
            self._slot_cache[key] = s
        return s

    def queue_bounds(self, topic: str, queue_id: int) -> tuple[int, int] | None:
        """(min offset, max offset = next to be written), or None for an unknown queue."""
        s = self._find_slot(topic, queue_id)
        if s < 0:
            return None
        slot = self.cb.ctl.queues[s]
        return slot.min_offset, lib.shmq_load_i64(self._next_ptr(s))

    def _next_ptr(self, s: int):
        return ffi.addressof(self.cb.ctl.queues[s], "next_offset")

    def min_offset(self, topic: str, queue_id: int) -> int:
        b = self.queue_bounds(topic, queue_id)
        return b[0] if b else 0

    def max_offset_watch(self, topic: str, queue_id: int):
        """A pointer to the queue's published max offset, for a reader that polls many queues
        (``load_max_offset(w)``: one C load, no lookup); None while the queue does not exist.
        Valid as long as this store is attached (a queue's slot never moves)."""
        s = self._find_slot(topic, queue_id)
        return None if s < 0 else ffi.addressof(self.cb.ctl.queues[s], "next_offset")

    @staticmethod
    def load_max_offset(watch) -> int:
        return lib.shmq_load_i64(watch)

    def max_offset(self, topic: str, queue_id: int) -> int:
        b = self.queue_bounds(topic, queue_id)
        return b[1] if b else 0

    def topics(self) -> set[str]:
        return {t for _, t, _, _, _ in self.cb.iter_queue_slots()}

    # ---- getMessage ---------------------------------------------------------------------
    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int = 32,
                     max_bytes: int = 256 * 1024, tag_codes=None, record_filter=None) -> GetResult:
        """Up to ``max_count`` messages from ``offset``. ``tag_codes``: a set of tag hash
        codes to keep (None keeps all); ``record_filter(view) -> bool`` checks a record
        (SQL92 properties). Filtered entries count in next_begin_offset, as in RocketMQ."""
        b = self.queue_bounds(topic, queue_id)
        if b is None:
            return GetResult(GetStatus.NO_MATCHED_LOGIC_QUEUE, 0, 0, 0)
        mn, mx = b
        if mx == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, 0, mn, mx)
        if offset < mn:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, mn, mn, mx)
        if offset == mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, offset, mn, mx)
        if offset > mx:
            return GetResult(GetStatus.OFFSET_OVERFLOW_BADLY, mx if mn > 0 or mx > 0 else 0, mn, mx)
        commit = self.cb.commit_pos
        cq = self.queues.get(topic, queue_id)
        res = GetResult(GetStatus.NO_MATCHED_MESSAGE, offset, mn, mx)
        msgs, qoffs = res.messages, res.queue_offsets
        size = 0
        pos = offset
        limit = min(mx, offset + max(MAX_SCAN_ENTRIES, max_count))
        view = self.commitlog.view
        min_phys = self.cb.ctl.pos.min_pos
        done = False
        while pos < limit and not done:
            progressed = False
            for qoff, phys, sz, tag in cq.entries(pos, limit - pos):
                progressed = True
                if phys + sz > commit:  # published queue offset, unpublished record: stop here
                    done = True
                    break
                pos = qoff + 1
                if phys < min_phys:
                    continue
                if tag_codes is not None and tag not in tag_codes:
                    continue
                if size + sz > max_bytes and msgs:
                    pos = qoff
                    done = True
                    break
                rec = view(phys, sz)
                if record_filter is not None and not record_filter(rec):
                    continue
                msgs.append(rec)
                qoffs.append(qoff)
                size += sz
                if len(msgs) >= max_count:
                    done = True
                    break
            if not progressed:
                break
        res.scanned = pos - offset
        res.next_begin_offset = pos
        if msgs:
            res.status = GetStatus.FOUND
        elif pos == offset:
            # nothing readable yet at offset (file gone or record not yet committed)
            res.status = GetStatus.OFFSET_FOUND_NULL
        return res

    def queue_reader(self, topic: str, queue_id: int, broker: str = "") -> "QueueReader | None":
        """The local consumer's reader of one queue (QueueReader), None while it does not exist."""
        s = self._find_slot(topic, queue_id)
        if s < 0:
            return None
        return QueueReader(self, topic, queue_id, s, broker)

    # ---- by position and time --------------------------------------------------------------
    def read_at(self, phys: int):
        """The record at commitlog offset ``phys`` (memoryview), or None."""
        if phys < self.cb.ctl.pos.min_pos or phys >= self.cb.commit_pos:
            return None
        try:
            rec = self.commitlog.record_at(phys)
        except (OSError, ValueError):
            return None
        if rec is None or phys + len(rec) > self.cb.commit_pos:
            return None
        return rec

    def _store_ts(self, phys: int) -> int:
        return _I64.unpack_from(self.commitlog.view(phys, R_STORETS + 8), R_STORETS)[0]

    def offset_by_time(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset whose message was stored at or after ``timestamp_ms``; the
        max offset when none was (store times never decrease along the log)."""
        b = self.queue_bounds(topic, queue_id)
        if b is None:
            return 0
        lo, hi = b
        cq = self.queues.get(topic, queue_id)
        while lo < hi:
            mid = (lo + hi) // 2
            e = cq.entry(mid)
            if e is None or e[0] < self.cb.ctl.pos.min_pos:
                lo = mid + 1
                continue
            if self._store_ts(e[0]) < timestamp_ms:
                lo = mid + 1
            else:
                hi = mid
        return lo

    def store_time_at(self, topic: str, queue_id: int, offset: int) -> int:
        """The store timestamp of the queue's entry at ``offset``, -1 when there is none
        (GET_TOPIC_STATS_INFO's lastUpdateTimestamp, GET_CONSUME_STATS's lastTimestamp)."""
        e = self.queues.get(topic, queue_id).entry(offset)
        return self._store_ts(e[0]) if e else -1

    def earliest_store_time(self, topic: str, queue_id: int) -> int:
        b = self.queue_bounds(topic, queue_id)
        if b is None or b[0] >= b[1]:
            return -1
        e = self.queues.get(topic, queue_id).entry(b[0])
        return self._store_ts(e[0]) if e else -1


class QueueReader:
    """One queue of an attached store as the local consumer reads it (``Reader.queue_reader``):
    ``read(offset, max_count)`` walks and decodes in C (``read_queue`` in hot.c, from this
    reader's ``st``, into the class bound with ``bind_ext``) and returns the messages and the
    next offset; the local pull thread gets the same read from its wake-up call (``wait_read``)
    and finishes it with ``read_on``. It reads only what get_messages would answer FOUND for
    without a filter, under the same visibility invariant (the acquire loads are in hot.c), and
    stops early, maybe at none, wherever get_messages has to decide (an offset out of range, an
    expired file, a compressed or bad record, a file not there): the caller then asks
    get_messages. Valid while its store is attached (a slot never moves)."""

    __slots__ = ("store", "topic", "utf8", "broker", "slot", "min_offset", "next_addr", "pos_addr", "cq", "per",
                 "fsize", "st")

    def __init__(self, store, topic: str, queue_id: int, s: int, broker: str):
        ctl = store.cb.ctl
        self.store = store
        self.topic, self.utf8, self.broker = topic, topic.encode(), broker
        self.slot = ctl.queues[s]
        self.min_offset = ffi.addressof(self.slot, "min_offset")  # min_offset[0]: one load, no struct lookup
        self.next_addr = int(ffi.cast("uintptr_t", ffi.addressof(self.slot, "next_offset")))
        self.pos_addr = int(ffi.cast("uintptr_t", ffi.addressof(ctl, "pos")))
        self.cq = store.queues.get(topic, queue_id)
        self.per, self.fsize = self.cq.per_file, store.commitlog.file_size
        # what read_queue (hot.c, Q_* order) reads: the ConsumeQueue file (index, mapping) and
        # the CommitLog file (first commit-log offset, mapping) read last (mappings stay while
        # attached), then the fixed part; this reader alone changes the first four
        self.st = [-1, b"", -1, b"", self.per, int(ffi.cast("uintptr_t", self.min_offset)), self.next_addr,
                   self.pos_addr, topic, self.utf8, broker]

    def read(self, offset: int, max_count: int) -> tuple[list, int]:
        r = read_queue(self.st, offset, max_count)
        if r is None:  # below min_offset, or in a ConsumeQueue file not mapped here yet
            if offset < self.min_offset[0]:
                return [], offset
            return self.read_on([], offset, -2, max_count)
        msgs, nxt, elsewhere = r
        if elsewhere == -1:
            return msgs, nxt  # caught up (or get_messages decides) in one C call: the common case
        return self.read_on(msgs, nxt, elsewhere, max_count)

    def read_raw(self, offset: int, max_count: int, max_bytes: int):
        """The broker's answer to an unfiltered pull of this queue in one C call (``read_raw`` in
        hot.c): (records as one bytes object, count, next offset, max offset, min offset), what
        get_messages answers FOUND with; None wherever get_messages must decide (an offset out
        of range, nothing readable yet, an expired entry, a file that is not there)."""
        st = self.st
        for _ in range(3):  # at most: map the ConsumeQueue file, then the CommitLog file
            try:
                r = read_raw(st, offset, max_count, max_bytes)
            except (OSError, ValueError):  # a mapping closed under us: map again next time
                st[0] = st[2] = -1
                return None
            if r.__class__ is tuple:
                return r
            if r == -1:
                return None
            if r == -2:
                fi = offset // self.per
                mm = self.cq.map(fi)
                if mm is None:
                    return None
                st[0], st[1] = fi, mm
                continue
            li = r // self.fsize
            if li * self.fsize == st[2]:
                return None
            try:
                st[3] = self.store.commitlog.map(li)
            except (OSError, ValueError):
                return None
            st[2] = li * self.fsize
        return None

    def read_on(self, out: list, pos: int, elsewhere: int, max_count: int) -> tuple[list, int]:
        """The rest of a read that stopped at the end of a file (read_queue's ``elsewhere``: a
        record in another CommitLog file, or -2, the end of the ConsumeQueue file)."""
        st = self.st
        while len(out) < max_count:
            if elsewhere >= 0:  # the next record is in another CommitLog file
                li = elsewhere // self.fsize
                if li * self.fsize == st[2]:
                    break  # ... but in this one, past its end: get_messages says what is wrong
                try:
                    st[3] = self.store.commitlog.map(li)
                except (OSError, ValueError):
                    break
                st[2] = li * self.fsize
            fi = pos // self.per
            if fi != st[0]:
                mm = self.cq.map(fi)
                if mm is None:
                    break
                st[0], st[1] = fi, mm
            r = read_queue(st, pos, max_count - len(out))
            if r is None:
                break  # below min_offset now: get_messages decides
            msgs, pos, elsewhere = r
            out += msgs
            if elsewhere == -1:
                break  # caught up, or get_messages decides
        return out, pos
