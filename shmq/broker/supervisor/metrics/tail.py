"""Bytes in and the message-size histogram per topic, from the ConsumeQueues (supervisor side).

Every append, local or remote, writes a 20-byte ConsumeQueue entry that carries the record's
size. A thread follows each queue from the offset it last read up to the queue's published
next offset, so its cost is proportional to the messages appended and nothing on the send
path counts. The sizes are of the stored record (header, topic and properties included),
which is what the CommitLog grows by. Rollback and prepared half messages have no entry and
are not counted (RocketMQ counts neither as a message in).
"""
from __future__ import annotations

import logging
import threading
from bisect import bisect_left

from shmq.service import ThreadService
from shmq.store.consume_queue import ENTRY, ENTRY_SIZE

log = logging.getLogger("shmq.broker.metrics")

#: RocketMQ 5's message-size buckets (bytes): 1 KiB, 4 KiB, 512 KiB, 1 MiB, 2 MiB, 4 MiB, overflow.
SIZE_BOUNDS = (1024, 4096, 512 * 1024, 1 << 20, 2 << 20, 4 << 20)
#: Entries read from one queue per pass: a backlog is caught up over several passes.
MAX_PER_PASS = 1 << 16


class TopicBytes:
    __slots__ = ("bytes", "buckets", "count")

    def __init__(self) -> None:
        self.bytes = 0
        self.count = 0
        self.buckets = [0] * (len(SIZE_BOUNDS) + 1)


class QueueTail(ThreadService):
    """Reads from the start of what the store holds: messages stored before this broker
    started are counted too (the counters equal the store's content, as messages_in does)."""

    def __init__(self, store, interval_s: float = 1.0):
        super().__init__("shmq-metrics-tail", interval_s, log=log)
        self.store = store
        self.topics: dict[str, TopicBytes] = {}
        self._read: dict[int, int] = {}  # queue slot -> next offset not yet read
        self._lock = threading.Lock()

    def run_once(self) -> None:
        self.pass_once()

    def snapshot(self) -> dict[str, tuple[int, int, list[int]]]:
        with self._lock:
            return {t: (b.bytes, b.count, list(b.buckets)) for t, b in self.topics.items()}

    def pass_once(self) -> None:
        for slot, topic, qid, nxt, mn in self.store.cb.iter_queue_slots():
            start = max(self._read.get(slot, 0), mn)
            if nxt <= start:
                continue
            end = min(nxt, start + MAX_PER_PASS)
            sizes = self._sizes(topic, qid, start, end)
            self._read[slot] = end
            if sizes:
                self._add(topic, sizes)

    def _sizes(self, topic: str, qid: int, start: int, end: int) -> list[int]:
        cq = self.store.queues.get(topic, qid)
        out: list[int] = []
        pos = start
        while pos < end:
            fi, n = divmod(pos, cq.per_file)
            mm = cq.map(fi)
            if mm is None:  # expired file: skip to the next one
                pos = (fi + 1) * cq.per_file
                continue
            k = min(cq.per_file - n, end - pos)
            view = memoryview(mm)[n * ENTRY_SIZE:(n + k) * ENTRY_SIZE]
            try:
                out += [size for _, size, _ in ENTRY.iter_unpack(view) if size > 0]
            finally:
                view.release()
            pos += k
        return out

    def _add(self, topic: str, sizes: list[int]) -> None:
        with self._lock:
            tb = self.topics.get(topic)
            if tb is None:
                tb = self.topics[topic] = TopicBytes()
            tb.bytes += sum(sizes)
            tb.count += len(sizes)
            for s in sizes:
                tb.buckets[bisect_left(SIZE_BOUNDS, s)] += 1
