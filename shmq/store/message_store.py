"""MessageStore: the one entry point of the store for the broker and for local clients.

``MessageStore.open(cfg)``  the owner (broker supervisor): takes store/lock, fences any
                            previous control block, recovers, creates a fresh control block
                            under a new generation, runs flush, index and cleanup services.
``MessageStore.attach(root)`` a process on the same host (broker worker, local producer or
                            consumer): maps the owner's control block and files, appends and
                            reads directly; no background services.

Both put through the C append, read ConsumeQueues and records zero-copy, and wait on the
store's futexes.
"""
from __future__ import annotations

import errno
import fcntl
import logging
import os

from shmq.errors import FlushDiskTimeout, FlushFailed, StaleSegment, StoreClosed, StoreLocked
from shmq.message.layout import HOST
from shmq.message.msgid import offset_msg_id
from shmq.message.names import UNIQ_KEY
from shmq.message.properties import encode_properties
from shmq.native import ffi, lib

from . import faults, files, ownership, validate
from .appender import Appender, QueueRegistry, raise_for_status
from .checkpoint import Checkpoint, path_of
from .commitlog import CommitLog
from .config import ASYNC_FLUSH, ROLE_SYNC_MASTER, StoreConfig
from .ha.sync import wait_replicated
from .control import ControlBlock
from .offsets_file import load_offsets, save_offsets
from .queue_writer import QueueWriter, fill_meta
from .reader import Reader
from .recovery import default_tag_code, recover

log = logging.getLogger("shmq.store")


class PutResult:
    __slots__ = ("phys_offset", "queue_offset", "size", "store_timestamp", "count", "end",
                 "_store_host", "topic", "queue_id")

    def __init__(self, out, store_host: bytes, topic: str, queue_id: int):
        self.phys_offset = out.phys_offset
        self.queue_offset = out.queue_offset
        self.size = out.size
        self.store_timestamp = out.store_ts
        self.count = out.count
        self.end = out.end
        self._store_host = store_host
        self.topic = topic
        self.queue_id = queue_id

    @property
    def msg_id(self) -> str:
        """Offset msgId of the first record (MessageDecoder.createMessageId)."""
        return offset_msg_id(self._store_host, self.phys_offset)

    def __repr__(self) -> str:
        return (f"PutResult(topic={self.topic!r}, queue_id={self.queue_id}, queue_offset={self.queue_offset}, "
                f"phys_offset={self.phys_offset}, count={self.count})")


class MessageStore(Reader):
    def __init__(self, cfg: StoreConfig, cb: ControlBlock, *, owner: bool):
        self.cfg = cfg
        self.cb = cb
        self.owner = owner
        self.commitlog = CommitLog(cfg)
        self.queues = QueueRegistry(cfg)
        self.appender = Appender(cb, self.commitlog, self.queues, cfg)
        self._closed = False
        self._lock_fd: int | None = None
        self.checkpoint = Checkpoint()
        self.flusher = None
        self.dispatcher = None
        self.cleaner = None
        self.recovery = None
        self._index_reader = None
        self._prefaulted: set[int] = set()  # CommitLog files the flush thread pre-touched
        h = cb.ctl.header
        cfg.mapped_file_size_commitlog = h.file_size
        cfg.cq_entries_per_file = h.cq_entries_per_file
        cfg.max_message_size = h.max_message_size
        o = cb.ctl.owner
        #: the raw STOREHOST of this store's records (IPv4 + port), the head of offset msgIds
        self.store_host = HOST.pack(o.store_ip.to_bytes(4, "big"), o.store_port)
        self.sync_flush = o.flush_mode != ASYNC_FLUSH
        self.sync_master = o.role == ROLE_SYNC_MASTER
        #: a put is confirmed only after a wait: for the disk (SYNC_FLUSH), for a slave
        #: (SYNC_MASTER), or both; ``wait_flushed`` waits for whichever applies
        self.sync_wait = self.sync_flush or self.sync_master
        self._sync_timeout_ns = o.sync_flush_timeout_ms * 1_000_000
        self._meta = ffi.new("shmq_meta *")
        self._out = ffi.new("shmq_result *")
        Reader.__init__(self)

    # ================================================================== opening ==
    @classmethod
    def open(cls, cfg: StoreConfig, *, tag_code=default_tag_code, start_services: bool = True) -> "MessageStore":
        faults.configure_from_env()
        dmode = files.dir_mode(cfg.file_mode)
        for d in (cfg.root, cfg.commitlog_dir, cfg.consumequeue_dir, cfg.config_dir):
            files.ensure_dir(d, dmode, cfg.group)
        lock_fd = os.open(os.path.join(cfg.root, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            # and the POSIX record lock on byte 0 that Apache RocketMQ's broker takes
            # (FileChannel.tryLock(0, 1, false)): on Linux the two kinds do not see each other
            fcntl.lockf(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, 0)
        except (BlockingIOError, PermissionError):
            os.close(lock_fd)
            raise StoreLocked(f"another broker owns the store at {cfg.root} (store/lock is held)")
        try:
            return cls._open_locked(cfg, lock_fd, tag_code, start_services)
        except BaseException:
            os.close(lock_fd)
            raise

    @classmethod
    def _open_locked(cls, cfg, lock_fd, tag_code, start_services):
        nonce = ownership.read_or_make_nonce(cfg)
        ownership.fence_previous(cfg, nonce)
        generation = ownership.bump_generation(cfg)
        abort_path = os.path.join(cfg.root, "abort")
        crashed = os.path.exists(abort_path)
        files.write_atomic(abort_path, b"")
        cb = ControlBlock.create(cfg, nonce, generation)
        store = cls(cfg, cb, owner=True)
        store._lock_fd = lock_fd
        store.tag_code = tag_code  # a slave's replica writer dispatches with it too
        store.checkpoint = Checkpoint.load(path_of(cfg.root))
        report, tables = recover(store.commitlog, store.queues, store.checkpoint, tag_code, crashed=crashed)
        store.recovery = report
        if crashed or report.cq_entries_written or report.cq_entries_cut or report.bytes_zeroed:
            log.warning("recovered %s after %s: scanned %d records from %d, end %d (%s); "
                        "%d CQ entries rewritten, %d cut, %d bytes zeroed",
                        cfg.root, "a crash" if crashed else "a clean stop", report.records_scanned,
                        report.start, report.end, report.stopped_because, report.cq_entries_written,
                        report.cq_entries_cut, report.bytes_zeroed)
        for (topic, qid), (nxt, mn) in tables.items():
            slot = store.appender.slot(topic, qid)
            s = cb.ctl.queues[slot]
            s.next_offset = nxt
            s.min_offset = mn
        indexes = store.commitlog.file_indexes()
        cb.ctl.pos.min_pos = indexes[0] * cfg.mapped_file_size_commitlog if indexes else 0
        _sync_range(store.commitlog, report.start, report.end)
        lib.shmq_publish_recovered(cb.ctl, report.end)
        for key, qid, off in load_offsets(cfg.config_dir):
            # After a crash, an offset past the recovered end (a consumer read records a power
            # cut then took) would skip as many new messages: it becomes the queue's max
            # offset. After a clean stop every record was flushed: offsets stay as committed.
            nxt = tables.get((key.split("@", 1)[0], qid), (0, 0))[0]
            if crashed and off > nxt:
                log.warning("consumer offset %s:%d was %d, past the recovered max offset %d: set to %d",
                            key, qid, off, nxt, nxt)
                off = nxt
            store._offset_set(key, qid, off)
        # The log is synced to report.end; the ConsumeQueue entries recovery wrote for
        # [start, end) are not yet (the flusher syncs them): cq_flushed stays at start.
        store.checkpoint = Checkpoint(report.end, min(report.start, report.end),
                                      min(store.checkpoint.index_flushed, report.end))
        store.checkpoint.store(path_of(cfg.root))
        cb.set_state(lib.SHMQ_STATE_READY)
        if start_services:
            store.start_services()
        return store

    @classmethod
    def attach(cls, root: str, *, lock_timeout_ms: int = 5000) -> "MessageStore":
        """Attach to the store a live broker owns. StaleSegment when there is none."""
        root = os.path.abspath(root)
        faults.configure_from_env()
        try:
            with open(os.path.join(root, "nonce")) as f:
                nonce = int(f.read().strip(), 16)
        except PermissionError as e:
            raise StaleSegment(f"no permission to map the store at {root} (it is private to its broker's "
                               f"user, or to storeGroup)") from e
        except (OSError, ValueError) as e:
            raise StaleSegment(f"{root} is not an initialised shmq store") from e
        cb = ControlBlock.attach(root, nonce)
        # READONLY (a flush failed) is attachable: reads go on, puts answer StoreReadOnly
        if cb.state not in (lib.SHMQ_STATE_READY, lib.SHMQ_STATE_READONLY) or not cb.owner_alive():
            cb.close()
            raise StaleSegment(f"the broker that owned {root} is gone or not ready")
        cfg = StoreConfig(root=root, lock_timeout_ms=lock_timeout_ms,
                          mapped_file_size_commitlog=cb.ctl.header.file_size)
        return cls(cfg, cb, owner=False)

    def start_services(self) -> None:
        from .cleanup import CleanupService
        from .dispatch import IndexDispatcher
        from .flush import FlushService
        self.flusher = FlushService(self)
        self.flusher.start()
        if self.cfg.message_index_enable:
            self.dispatcher = IndexDispatcher(self)
            self.dispatcher.start()
        self.cleaner = CleanupService(self)
        self.cleaner.start()

    # ================================================================== putting ==
    def put(self, topic: str, queue_id: int, body: bytes, properties: dict | bytes = b"", *,
            flag: int = 0, sysflag: int = 0, born_timestamp: int | None = None,
            born_host: tuple[str, int] = ("127.0.0.1", 0), reconsume_times: int = 0,
            prepared_offset: int = 0, tag_code: int | None = None,
            deliver_delay_ms: int | None = None, wait_flush: bool = True) -> PutResult:
        """Append one message. Bad input raises before anything is written. With SYNC_FLUSH
        the call returns once the record is on disk (FlushDiskTimeout otherwise: stored but
        not confirmed)."""
        self._check_open()
        validate.check_topic(topic)
        props = encode_properties(properties).encode() if isinstance(properties, dict) else bytes(properties)
        validate.check_sizes(len(body), len(props), self.cfg.max_message_size)
        a = self.appender
        m, out = self._meta, self._out
        with a.lock:
            slot = a.slot(topic, queue_id)
            fill_meta(m, flag, sysflag, born_timestamp, born_host, reconsume_times, prepared_offset,
                       tag_code, deliver_delay_ms)
            a.put(slot, m, body, props, out)
            res = PutResult(out, self.store_host, topic, queue_id)
        if self.sync_wait and wait_flush:
            self.wait_flushed(res)
        return res

    def put_batch(self, topic: str, queue_id: int, batch_body: bytes, extra_properties: dict | bytes = b"", *,
                  sysflag: int = 0, born_timestamp: int | None = None,
                  born_host: tuple[str, int] = ("127.0.0.1", 0), wait_flush: bool = True) -> PutResult:
        """Append a batch body (RocketMQ's SEND_BATCH_MESSAGE layout) as consecutive records of
        one queue under one lock. ``extra_properties`` are appended to every entry's."""
        self._check_open()
        validate.check_topic(topic)
        extra = (encode_properties(extra_properties).encode() if isinstance(extra_properties, dict)
                 else bytes(extra_properties))
        if len(batch_body) > self.cfg.max_message_size:
            validate.check_sizes(len(batch_body), 0, self.cfg.max_message_size)
        a = self.appender
        m, out = self._meta, self._out
        with a.lock:
            slot = a.slot(topic, queue_id)
            fill_meta(m, 0, sysflag, born_timestamp, born_host, 0, 0, None, None)
            a.put_batch(slot, m, batch_body, extra, out)
            res = PutResult(out, self.store_host, topic, queue_id)
        if self.sync_wait and wait_flush:
            self.wait_flushed(res)
        return res

    def queue_writer(self, topic: str, queue_id: int, born_host=("127.0.0.1", 0)) -> "QueueWriter":
        """A handle for the fastest path: one queue, caller-built properties bytes."""
        self._check_open()
        validate.check_topic(topic)
        return QueueWriter(self, topic, queue_id, born_host)

    def wait_flushed(self, res: PutResult) -> None:
        """The wait before the put that answered ``res`` is confirmed (RocketMQ's
        handleDiskFlush, then handleHA): FlushDiskTimeout / ReplicationError, carrying ``res``,
        when it takes longer than the sync flush timeout."""
        if self.sync_flush:
            rc = lib.shmq_wait_flushed(self.cb.ctl, res.end, self._sync_timeout_ns)
            if rc == lib.SHMQ_ETIMEDOUT:
                raise FlushDiskTimeout(f"not flushed within {self._sync_timeout_ns // 1_000_000} ms", result=res)
            if rc == lib.SHMQ_EIO:
                raise FlushFailed(result=res)
            if rc:
                raise_for_status(rc)
        if self.sync_master:
            wait_replicated(self.cb.ctl, res.end, self._sync_timeout_ns, res)

    # ================================================================== offsets ==
    def commit_offset(self, group: str, topic: str, queue_id: int, offset: int) -> None:
        self._check_open()
        self._offset_set(f"{topic}@{group}", queue_id, offset)

    def commit_offset_word(self, group: str, topic: str, queue_id: int) -> int:
        """The address of the word :meth:`commit_offset` writes for (group, topic, queue), its
        slot made if new: a C caller (the worker's pull path, remoting_pull.c) stores a committed
        offset there as commit_offset does. Valid while attached (an offset slot never moves)."""
        self._check_open()
        i = self.appender.offset_slot(f"{topic}@{group}", queue_id)
        return int(ffi.cast("uintptr_t", ffi.addressof(self.cb.offsets[i], "offset")))

    def query_offset(self, group: str, topic: str, queue_id: int) -> int:
        """The committed offset, or -1 when the group never committed one for this queue."""
        self._check_open()
        k = f"{topic}@{group}".encode()
        i = lib.shmq_offset_find(self.cb.ctl, k, len(k), queue_id)
        return -1 if i < 0 else self.cb.offsets[i].offset

    def _offset_set(self, key: str, queue_id: int, offset: int) -> None:
        i = self.appender.offset_slot(key, queue_id)
        self.cb.offsets[i].offset = offset

    def offset_table(self) -> dict[str, dict[int, int]]:
        out: dict[str, dict[int, int]] = {}
        for _, key, qid, off in self.cb.iter_offset_slots():
            if off >= 0:
                out.setdefault(key, {})[qid] = off
        return out

    def persist_offsets(self) -> None:
        save_offsets(self.cfg.config_dir, self.offset_table())

    # ================================================================== index ==
    def _index(self):
        """The owner's live IndexService, or (attached processes) a read-only view of the files."""
        if self.dispatcher is not None:
            return self.dispatcher.index
        if self._index_reader is None:
            from .index_service import IndexService
            o = self.cb.ctl.owner
            self._index_reader = IndexService(self.cfg.index_dir, o.index_hash_slots, o.index_num, readonly=True)
            self._index_reader.load()
        return self._index_reader

    def index_flushed_upto(self) -> int:
        if self.dispatcher is not None:
            return self.dispatcher.flushed_upto
        return self.checkpoint.index_flushed

    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                     end_ms: int = 2**62) -> list:
        """Records (memoryviews) whose KEYS or UNIQ_KEY holds ``key``, newest first. Index
        hash collisions are filtered out by reading the record back."""
        from shmq.message.record import decode_record
        out = []
        for phys in self._index().query(topic, key, max_num, begin_ms, end_ms):
            rec = self.read_at(phys)
            if rec is None:
                continue
            m = decode_record(rec)
            if m.topic == topic and (key in m.keys or m.properties.get(UNIQ_KEY) == key):
                out.append(rec)
        return out

    # ================================================================== expiry ==
    def add_expiry_guard(self, guard) -> None:
        """``guard(end) -> bool`` is asked before the CommitLog below ``end`` is deleted; False
        keeps the file for now (the timer wheel re-appends the timers it still needs first)."""
        self._expiry_guards = [*getattr(self, "_expiry_guards", ()), guard]

    def remove_expiry_guard(self, guard) -> None:
        self._expiry_guards = [g for g in getattr(self, "_expiry_guards", ()) if g is not guard]

    def expiry_allowed(self, end: int) -> bool:
        return all(g(end) for g in getattr(self, "_expiry_guards", ()))

    # ================================================================== waiting ==
    @property
    def commit_pos(self) -> int:
        return self.cb.commit_pos

    @property
    def flushed_pos(self) -> int:
        return self.cb.flushed_pos

    def wait(self, seen: int, timeout: float, spin: float = 0.0) -> int:
        """Block until the commit position passes ``seen`` (or timeout); returns it. The GIL is
        released while waiting (futex)."""
        return lib.shmq_wait_data(self.cb.ctl, seen, int(spin * 1e9), int(timeout * 1e9))

    def flush(self) -> None:
        """Make everything committed so far durable now (CommitLog, ConsumeQueues, checkpoint)."""
        self._check_open()
        if self.owner and self.flusher:
            self.flusher.flush_queues_and_checkpoint()
        else:
            rc = lib.shmq_wait_flushed(self.cb.ctl, self.commit_pos, self._sync_timeout_ns or 5_000_000_000)
            if rc:
                raise_for_status(rc, "flush")

    # ================================================================== life ==
    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed()

    def mark_read_only(self, err: int, what: str) -> None:
        """Owner: an I/O error on a flush (``what`` failed with ``err``). The store turns
        read-only for good: puts answer StoreReadOnly (SERVICE_NOT_AVAILABLE), the SYNC_FLUSH
        puts still waiting answer FlushFailed (FLUSH_DISK_TIMEOUT), nothing more is flushed or
        checkpointed (the dirty pages may be gone: a flush that "succeeds" later would be a
        lie), reads go on. A restart recovers from the last good checkpoint."""
        first = not self.cb.ctl.pos.io_error
        lib.shmq_set_flushed(self.cb.ctl, 0, err or errno.EIO)
        if first:
            log.critical("%s failed (%s): the store at %s is READ-ONLY now: sends are refused, reads go on; "
                         "restart the broker once the disk is fixed", what, os.strerror(err or errno.EIO),
                         self.cfg.root)

    def prealloc_tick(self) -> None:
        """Owner, from the flush thread: the file being written (from the commit position on)
        and the one after it are created and pre-touched ahead of need."""
        fsize = self.cfg.mapped_file_size_commitlog
        pos = self.commit_pos
        cur = pos // fsize
        for idx, start in ((cur, pos % fsize), (cur + 1, 0)):
            if idx not in self._prefaulted:
                self.commitlog.prefault(idx, start)
                self._prefaulted.add(idx)
        self._prefaulted = {i for i in self._prefaulted if i >= cur}

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.owner:
            self._shutdown_owner()
        if self._index_reader is not None:
            self._index_reader.close()
        self.appender.close()
        self.cb.close()
        self.queues.close()
        self.commitlog.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _shutdown_owner(self) -> None:
        # Fence first: from here no local writer can add a record we would not flush.
        a = self.appender
        rc = lib.shmq_lock(a.w)
        lib.shmq_fence(self.cb.ctl)
        if rc == 0:
            lib.shmq_unlock(a.w)
        for svc in (self.cleaner, self.dispatcher, self.flusher):
            if svc is not None:
                svc.stop()
        clean = True
        try:
            if self.flusher:
                self.flusher.flush_queues_and_checkpoint()
            else:
                _sync_range(self.commitlog, self.checkpoint.log_flushed, self.commit_pos)
                Checkpoint(self.commit_pos, self.commit_pos, self.checkpoint.index_flushed).store(path_of(self.cfg.root))
            self.persist_offsets()
        except OSError:
            log.exception("flush at shutdown failed: keeping the abort file")
            clean = False
        if self.cb.ctl.pos.io_error:
            clean = False
        self.cb.unlink()
        if clean:
            try:
                os.unlink(os.path.join(self.cfg.root, "abort"))
                files.fsync_dir(self.cfg.root)
            except FileNotFoundError:
                pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


# ====================================================================== helpers ==


def _sync_range(commitlog: CommitLog, start: int, end: int) -> None:
    fsize = commitlog.file_size
    for idx in range(start // fsize, (max(end, start + 1) - 1) // fsize + 1):
        path = commitlog.path(idx)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        try:
            faults.synced(path)
            os.fdatasync(fd)
        finally:
            os.close(fd)
