"""The owner's flush services (two threads, as RocketMQ's GroupCommitService and
FlushConsumeQueueService): the group-commit thread msyncs the CommitLog every
flushIntervalCommitLog, or at once for SYNC_FLUSH waiters (group commit: one msync of the
dirty range covers every putter waiting at that moment, and the next one starts as soon as it
returns); the queue thread fdatasyncs the ConsumeQueues every flushIntervalConsumeQueue, then
writes the checkpoint, and creates / pre-faults the CommitLog files ahead of the writers. The
split keeps the queue thread's syncs (a dozen fdatasyncs and the checkpoint's fsync + rename +
directory fsync, 5-290 ms a second on a shared disk) and a new file's pre-fault off the
SYNC_FLUSH answer's path: on one thread, a send that came during them waited for all of them.
The checkpoint stays true without a CommitLog flush of its own: it records the flushed position
read after its ConsumeQueue syncs (durable by then), and no queue entry above it.

Always MS_SYNC: MS_ASYNC does nothing on Linux. A failed flush (an I/O error on the CommitLog
msync, a ConsumeQueue fdatasync or the checkpoint's fsync) makes the store read-only
(``MessageStore.mark_read_only``): the kernel may have dropped the dirty pages, so a retry that
"succeeds" would be a lie (PostgreSQL's fsync lesson). A full disk is not an I/O error: the
preallocation ahead of the writers and the checkpoint write are retried, said once in the log,
and the flushing goes on (the old checkpoint stays: it is replaced atomically).
Every msync passes the store's one fault and trace hook (store/faults.py).
"""
from __future__ import annotations

import errno
import logging
import os
import threading
import time

from shmq.errors import DiskFull

from shmq.native import ffi, lib
from shmq.service import ThreadService

from . import faults, files
from .checkpoint import Checkpoint, path_of
from .queue_files import prepare_next

log = logging.getLogger("shmq.store.flush")

#: Under SYNC_FLUSH the flusher wakes at least this often even if no waiter announced itself.
SYNC_MAX_WAIT_S = 0.010
#: After an unexpected failure (a bug, not an msync error: that poisons the store instead).
RETRY_AFTER_FAILURE_S = 0.05
#: The C group commit returns to Python at least this often (the service's own checks).
C_ROUND_S = 1.0
#: The queue thread's round: CommitLog files prepared ahead at least this often.
PREPARE_EVERY_S = 0.1


#: 1 while the CommitLog msyncs may be made in C, outside store/faults.py's hooks:
#: shmq_group_commit reads it before each msync, so a hook configured meanwhile sees the next one
_IN_C = ffi.new("int32_t *", 0 if faults.ACTIVE else 1)


def _faults_configured() -> None:
    _IN_C[0] = 0 if faults.ACTIVE else 1


faults.on_configure.append(_faults_configured)


class FlushService(ThreadService):
    """The group-commit thread. Sleeps in the C flusher wait (woken early by a SYNC_FLUSH
    putter), not on the service's Event; stop and wake post an impossible flush request, which
    ends that wait at once. Starts and stops its queue thread (``QueueFlushService``) with it."""

    def __init__(self, store):
        cfg = store.cfg
        interval = cfg.flush_interval_commitlog_ms / 1000.0
        if cfg.flush_disk_type:
            interval = min(interval, SYNC_MAX_WAIT_S)
        super().__init__("shmq-flush", interval, log=log, error_delay_s=RETRY_AFTER_FAILURE_S)
        self.store = store
        self.cb = store.cb
        self.cfg = cfg
        self.checkpoint = store.checkpoint
        self._cq_flushed: dict[int, int] = {}  # slot -> next offset at the last CQ flush
        self._last_cq = time.monotonic()
        self._pins: dict[int, object] = {}
        self._named_upto = -1  # CommitLog files up to this index have a durable name
        #: called with the seconds each CommitLog flush took (the broker's metrics set it)
        self.on_flush = None
        self._disk_full: set[str] = set()  # what a full disk holds back now (said once each)
        # flush_commitlog runs on this thread and, at shutdown or Store.flush, on the caller's;
        # the queue thread and those callers share flush_queues_and_checkpoint
        self._log_lock = threading.Lock()
        self._cq_lock = threading.Lock()
        self.queue_service = QueueFlushService(self)

    def start(self) -> None:
        super().start()
        self.queue_service.start()

    def stop(self, timeout: float | None = None) -> bool:
        side = self.queue_service.stop(timeout)
        return super().stop(timeout) and side

    def sleep(self, seconds: float) -> None:
        lib.shmq_flusher_wait(self.cb.ctl, int(seconds * 1e9))

    def interrupt(self) -> None:
        # A request past any position wakes the flusher at once (timeout 0: we do not wait).
        lib.shmq_wait_flushed(self.cb.ctl, 2**62, 0)

    def run_once(self) -> None:
        self.flush_commitlog()
        if not faults.ACTIVE and self.on_flush is None:
            self._group_commit_in_c()

    def _group_commit_in_c(self) -> None:
        """The steady state in C, GIL released (``shmq_group_commit``): within the file the
        flushed position is in, once that file is named and mapped; it returns to this loop
        (flush_commitlog crosses into the next file) or on stop. A fault or trace hook, or a
        metrics hook timing each flush, keeps every msync in Python instead."""
        fsize = self.store.commitlog.file_size
        idx = self.cb.flushed_pos // fsize
        with self._log_lock:
            buf = self._file(idx)
        if buf is None or self.stopping:
            return
        rc = lib.shmq_group_commit(self.cb.ctl, ffi.cast("uint8_t *", buf), idx * fsize, (idx + 1) * fsize,
                                   int(self.interval_s * 1e9), int(C_ROUND_S * 1e9), _IN_C)
        if rc < 0:
            self.store.mark_read_only(-rc, "msync of the commitlog")

    def _file(self, idx: int):
        """CommitLog file ``idx`` ready for msyncs: its name durable (before flushed_pos covers
        any byte of it: a file whose name is lost is lost whole) and its mapping pinned; None
        if its directory fsync failed (the store is read-only then)."""
        if idx > self._named_upto:
            try:
                files.make_names_durable(self.store.commitlog.path(idx), os.path.dirname(self.cfg.commitlog_dir))
            except OSError as e:
                self.store.mark_read_only(e.errno or errno.EIO, "fsync of the commitlog directory")
                return None
            self._named_upto = idx
        buf = self._pins.get(idx)
        if buf is None:
            if len(self._pins) > 8:
                self._pins.clear()
            buf = self._pins[idx] = ffi.from_buffer(self.store.commitlog.map(idx))
        return buf

    # ---- the work (also called directly at shutdown and by Store.flush) -------------------
    def flush_commitlog(self) -> int:
        with self._log_lock:
            return self._flush_commitlog()

    def _flush_commitlog(self) -> int:
        ctl = self.cb.ctl
        target = self.cb.commit_pos
        done = self.cb.flushed_pos
        if target <= done or ctl.pos.io_error:
            return done
        fsize = self.store.commitlog.file_size
        t0 = time.perf_counter()
        pos = done
        while pos < target:
            idx, off = divmod(pos, fsize)
            n = min(fsize - off, target - pos)
            buf = self._file(idx)
            if buf is None:
                return done
            err = (faults.ACTIVE and faults.msync_errno(self.store.commitlog.path(idx), self.store.commitlog.map(idx),
                                                        off, n)) or lib.shmq_msync(ffi.cast("uint8_t *", buf) + off, n)
            if err:
                self.store.mark_read_only(err, "msync of the commitlog")
                return done
            pos += n
        lib.shmq_set_flushed(ctl, target, 0)
        hook = self.on_flush
        if hook is not None:
            hook(time.perf_counter() - t0)
        return target

    def flush_queues_and_checkpoint(self, flush_log: bool = True) -> None:
        """ConsumeQueues, then the checkpoint. ``flush_log``: flush the CommitLog too (a direct
        call: shutdown, Store.flush); the queue thread passes False and records what the
        group-commit thread has flushed."""
        with self._cq_lock:
            self._flush_queues_and_checkpoint(flush_log)

    def _flush_queues_and_checkpoint(self, flush_log: bool) -> None:
        self._last_cq = time.monotonic()
        if self.cb.ctl.pos.io_error:
            return  # read-only after a failed flush: never retried (see the module doc)
        cq_upto = self.cb.commit_pos  # every record below has its CQ entry written already
        for slot, topic, qid, nxt, _ in self.cb.iter_queue_slots():
            last = self._cq_flushed.get(slot, 0)
            if nxt > last:
                cq = self.store.queues.get(topic, qid)
                try:
                    cq.flush_range(last, nxt)
                except OSError as e:
                    self.store.mark_read_only(e.errno or errno.EIO, f"fdatasync of consume queue {topic}:{qid}")
                    return
                self._cq_flushed[slot] = nxt
                prepare_next(cq, nxt)  # the queue's next file, before a writer needs it
        # read after the queue syncs: every CommitLog byte below is durable, whichever thread
        # flushed it
        log_flushed = self.flush_commitlog() if flush_log else self.cb.flushed_pos
        if self.cb.ctl.pos.io_error:
            return  # read-only: the checkpoint keeps saying what was flushed before the error
        cp = self.checkpoint
        new = Checkpoint(log_flushed, min(cq_upto, log_flushed),
                         self.store.index_flushed_upto())
        if (new.log_flushed, new.cq_flushed, new.index_flushed) != (cp.log_flushed, cp.cq_flushed, cp.index_flushed):
            try:
                self._while_disk_full("checkpoint", new.store, path_of(self.cfg.root))
            except OSError as e:
                self.store.mark_read_only(e.errno or errno.EIO, "the checkpoint write")
                return
            if "checkpoint" not in self._disk_full:
                self.store.checkpoint = self.checkpoint = new

    def _while_disk_full(self, what: str, fn, *args) -> None:
        """Run ``fn``; a full disk (DiskFull, ENOSPC, EDQUOT) is logged once until it passes
        and does not stop the flushing; any other OSError propagates."""
        try:
            fn(*args)
        except (DiskFull, OSError) as e:
            if not isinstance(e, DiskFull) and e.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            if what not in self._disk_full:
                self._disk_full.add(what)
                log.error("%s held back: the disk is full (%s); retrying at every flush", what, e)
            return
        if what in self._disk_full:
            self._disk_full.discard(what)
            log.warning("%s done again: the disk has room", what)


class QueueFlushService(ThreadService):
    """The queue thread (see the module doc): CommitLog files prepared ahead every round, the
    ConsumeQueues and the checkpoint every flushIntervalConsumeQueue."""

    def __init__(self, flusher: FlushService):
        cfg = flusher.cfg
        # prealloc_tick ran after every CommitLog flush before (<= 500 ms apart); a new file is
        # needed at most once a file, so 100 ms is ahead of any writer that fills one slower
        tick = min(PREPARE_EVERY_S, cfg.flush_interval_consume_queue_ms / 1000.0)
        super().__init__("shmq-flush-cq", tick, log=log, error_delay_s=RETRY_AFTER_FAILURE_S, first_delay_s=0)
        self.flusher = flusher

    def run_once(self) -> None:
        f = self.flusher
        f._while_disk_full("preallocation", f.store.prealloc_tick)
        if time.monotonic() - f._last_cq >= f.cfg.flush_interval_consume_queue_ms / 1000:
            f.flush_queues_and_checkpoint(flush_log=False)
