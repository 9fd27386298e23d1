"""The Python side of the C append: one ``shmq_writer`` per process, the mappings it needs,
and the translation of C status codes into exceptions (through the one table in shmq.errors).

The hot path is ``Appender.put`` / ``put_batch``: one cffi call per message or batch. The C
core answers ENEEDLOG (after releasing the lock) when the append needs a CommitLog file this
process has not mapped; we map it outside the lock and call again. ConsumeQueue files the C
append maps itself; ENEEDCQ means the file does not exist yet: we create it and call again. That happens once per
file, so the retry loop costs nothing on the steady path. SHMQ_ECQSPACE: the append could
not map its ConsumeQueue file or allocate the pages ahead of its entries (files are sparse;
see files.py): DiskFull on ENOSPC/EDQUOT, StoreError otherwise; nothing was written.
"""
from __future__ import annotations

import errno
import os
import threading
import weakref

from shmq.errors import NOT_AVAILABLE_REMARK, DiskFull, StoreError, error_for_status
from shmq.native import ffi, lib

from . import files
from .commitlog import CommitLog
from .config import StoreConfig
from .consume_queue import ConsumeQueue
from .control import ControlBlock

BATCH_SCRATCH = 65536  # most entries a batch may hold (a 4 MiB batch of ~64 B entries)

_live: "weakref.WeakSet[Appender]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    # The lock word names the process: a child must never append with its parent's token
    # (were it to die holding the lock, waiters would see the parent alive and never steal).
    # The shared mappings survive fork, so a fresh token is all a child needs.
    token = lib.shmq_self_token()
    for a in list(_live):
        a.w.token = token


os.register_at_fork(after_in_child=_after_fork_in_child)


def raise_for_status(rc: int, what: str = "append", size: int = 0, limit: int = 0):
    """Raise the exception of the C status ``rc`` (the table is shmq.errors.error_for_status)."""
    raise error_for_status(rc, what, size, limit)


class Appender:
    def __init__(self, cb: ControlBlock, commitlog: CommitLog, queues: "QueueRegistry",
                 cfg: StoreConfig):
        self.cb = cb
        self.commitlog = commitlog
        self.queues = queues
        self.cfg = cfg
        qcap = cb.ctl.header.queue_capacity
        w = self.w = ffi.new("shmq_writer *")
        w.ctl = cb.ctl
        w.token = lib.shmq_self_token()
        w.generation = cb.generation
        w.lock_timeout_ms = cfg.lock_timeout_ms
        for i in range(lib.SHMQ_LOG_RING):
            w.logs[i].index = -1
        self._cq_maps = ffi.new("shmq_map[]", 2 * qcap)
        for i in range(2 * qcap):
            self._cq_maps[i].index = -1
        w.cqs = self._cq_maps  # filled by the C append (cq_attach), unmapped by close
        self._scratch_crc = ffi.new("uint32_t[]", BATCH_SCRATCH)
        self._scratch_tag = ffi.new("int64_t[]", BATCH_SCRATCH)
        w.scratch_crc = self._scratch_crc
        w.scratch_tag = self._scratch_tag
        w.scratch_cap = BATCH_SCRATCH
        self._pins: dict[tuple, object] = {}  # keeps the cdata buffers behind w->logs
        self._slots: dict[tuple[str, int], int] = {}
        self._prepared: set[int] = set()  # slots whose files prepare() mapped (a set: GIL-atomic)
        self.lock = threading.Lock()  # one shmq_writer: one thread inside the C append at a time
        self.meta = ffi.new("shmq_meta *")
        self.out = ffi.new("shmq_result *")
        _live.add(self)

    # ---- slots ---------------------------------------------------------------------------
    def slot(self, topic: str, queue_id: int) -> int:
        key = (topic, queue_id)
        s = self._slots.get(key)
        if s is None:
            t = topic.encode()
            s = lib.shmq_queue_create(self.w, t, len(t), queue_id)
            if s < 0:
                raise_for_status(s, f"queue {topic}:{queue_id}")
            self._slots[key] = s
        return s

    def offset_slot(self, key: str, queue_id: int) -> int:
        k = key.encode()
        s = lib.shmq_offset_create(self.w, k, len(k), queue_id)
        if s < 0:
            raise_for_status(s, f"offset {key}:{queue_id}")
        return s

    # ---- the append -----------------------------------------------------------------------
    def put(self, slot: int, meta, body, props, out) -> None:
        """One record. ``meta`` and ``out`` are cffi structs owned by the caller (reused)."""
        w = self.w
        while True:
            rc = lib.shmq_put(w, slot, meta, body, len(body), props, len(props), out)
            if rc == 0:
                return
            self.recover(rc, len(body))

    def put_batch(self, slot: int, meta, batch, extra, out) -> None:
        w = self.w
        while True:
            rc = lib.shmq_put_batch(w, slot, meta, batch, len(batch), extra, len(extra), out)
            if rc == 0:
                return
            self.recover(rc, len(batch))

    def recover(self, rc: int, size: int) -> None:
        """After a non-zero status: map what the append asked for (the caller retries) or raise."""
        w = self.w
        if rc == lib.SHMQ_ENEEDLOG:
            self.map_log(w.need_index)
        elif rc == lib.SHMQ_ENEEDCQ:
            self.map_cq(w.need_slot, w.need_index)
        elif rc == lib.SHMQ_ECQSPACE:
            why = os.strerror(w.os_errno)
            if w.os_errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull(f"cannot allocate ConsumeQueue space: {why}",
                               remark=NOT_AVAILABLE_REMARK.format(f"the disk is full: {why}"))
            raise StoreError(f"cannot map or allocate a ConsumeQueue file: {why}")
        else:
            raise_for_status(rc, size=size, limit=self.cfg.max_message_size)

    def map_log(self, index: int) -> None:
        mm = self.commitlog.map(index, create=True)
        buf = ffi.from_buffer(mm)
        ring = index % lib.SHMQ_LOG_RING
        self._pins[("log", ring)] = buf
        self.w.logs[ring].addr = ffi.cast("uint8_t *", buf)
        self.w.logs[ring].index = index

    def map_cq(self, slot: int, file_index: int) -> None:
        """ENEEDCQ: the queue's file does not exist yet (its topic's files are made when the
        topic is: store/queue_files.py). Create it, sparse; the C append maps it itself."""
        s = self.cb.ctl.queues[slot]
        topic = ffi.unpack(s.topic, s.topic_len).decode()
        cq = ConsumeQueue(self.cfg, topic, s.queue_id)
        files.create_sparse(cq.path(file_index), cq.file_bytes, self.cfg.file_mode, self.cfg.group)

    def prepare(self, slot: int) -> None:
        """Off the send path (a producer learning a topic: client/local_send.py): map the
        queue's current ConsumeQueue file into this writer and reserve and fault in the page of its
        next entry, so its next append makes no syscall and takes no fault (shmq_cq_prepare).
        Once per slot of this writer. Failures are left to the append, which meets them again
        and answers them as it always did (DiskFull, StoreError, a stale store)."""
        if slot in self._prepared:
            return
        rc = lib.shmq_cq_prepare(self.w, slot)
        if rc == lib.SHMQ_ENEEDCQ:
            self.map_cq(slot, self.w.need_index)
            rc = lib.shmq_cq_prepare(self.w, slot)
        if rc == 0:
            self._prepared.add(slot)

    def set_fault(self, point: int, action: int) -> None:
        """Tests: make the C append pause (until killed) or kill itself at a fault point."""
        self.w.fault_point = point
        self.w.fault_action = action

    def close(self) -> None:
        self._pins.clear()
        lib.shmq_writer_unmap(self.w)  # the C append's own ConsumeQueue mappings
        for i in range(lib.SHMQ_LOG_RING):
            self.w.logs[i].index = -1
        _live.discard(self)


class QueueRegistry:
    """The ConsumeQueue objects of this process, one per (topic, queue id)."""

    def __init__(self, cfg: StoreConfig):
        self.cfg = cfg
        self._queues: dict[tuple[str, int], ConsumeQueue] = {}
        self._lock = threading.Lock()

    def get(self, topic: str, queue_id: int) -> ConsumeQueue:
        key = (topic, queue_id)
        cq = self._queues.get(key)
        if cq is None:
            with self._lock:
                cq = self._queues.get(key)
                if cq is None:
                    cq = self._queues[key] = ConsumeQueue(self.cfg, topic, queue_id)
        return cq

    def known(self) -> list[ConsumeQueue]:
        return list(self._queues.values())

    def on_disk(self) -> list[tuple[str, int]]:
        out = []
        root = self.cfg.consumequeue_dir
        try:
            topics = os.listdir(root)
        except FileNotFoundError:
            return out
        for t in topics:
            d = os.path.join(root, t)
            if not os.path.isdir(d):
                continue
            for q in os.listdir(d):
                if q.lstrip("-").isdigit():
                    out.append((t, int(q)))
        return out

    def close(self) -> None:
        with self._lock:
            qs, self._queues = list(self._queues.values()), {}
        for q in qs:
            q.close()
