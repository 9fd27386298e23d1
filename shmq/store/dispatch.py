"""The index dispatcher (owner only): follows the commit position and feeds every record's
keys into the IndexFiles. It may lag the append by milliseconds; its durable progress (the
offset below which every record is in index files on disk) goes into the checkpoint.

A full disk when the next IndexFile (420 MB by default) cannot be made does not stop the store:
indexing is held back where it stands (said once in the log), retried every DISK_FULL_RETRY_S,
and catches up from there once space returns (queries by key miss only the records not yet
indexed meanwhile). An I/O error on an index flush makes the store read-only, as any failed
flush does (flush.py); indexing stops, queries go on."""
from __future__ import annotations

import errno
import logging
import time

from shmq.errors import DiskFull
from shmq.service import ThreadService

from .index_service import IndexService

log = logging.getLogger("shmq.store.index")
_SLICE = 4 << 20  # bytes of records per C run
#: The index may lag the append by this much under load. Only query-by-key reads it, and a
#: poll is a wake-up of this thread competing with producers and consumers for the CPU: in the
#: busy TCP rows a wake-up costs this thread ~240 µs of CPU whatever it finds (a cold Python
#: round on a CPU the row's processes keep busy; bench/supervisor_cpu.py), so at 5 ms (200 a
#: second) the polls were ~3 µs of every message at 10-17k msgs/s and the C indexing itself
#: ~0.2. At 50 ms one C run indexes a few hundred records. An idle store is not polled: its
#: next append wakes this thread at once (the futex below), so a query soon after a lone send
#: finds it.
BUSY_POLL_S = 0.05
#: Idle (no append for BUSY_FOR_S): sleep on the store's "new data" futex, this long at most.
IDLE_WAIT_S = 0.1
BUSY_FOR_S = 0.02
#: How often the index files are msynced (and so how far the checkpoint's index_flushed may
#: lag). Each msync write-protects every page it writes, so the next put into a hash slot's
#: page takes a write fault and dirties it again: at 1 s the ~5,000 hash-table pages of a busy
#: index were faulted and written again every second (~1 µs of this thread's system time a
#: message). The lag costs nothing at recovery: after a crash the newest index file is rebuilt
#: from its beginning whenever anything was indexed since its last flush (truncate_after), and
#: the kernel writes dirty pages back within ~30 s anyway.
FLUSH_EVERY_S = 10.0
RETRY_AFTER_FAILURE_S = 0.1
#: While the disk is full: how often the next IndexFile is tried again.
DISK_FULL_RETRY_S = 1.0


class IndexDispatcher(ThreadService):
    def __init__(self, store):
        super().__init__("shmq-index", BUSY_POLL_S, log=log, first_delay_s=0,
                         error_delay_s=RETRY_AFTER_FAILURE_S)
        self.store = store
        cfg = store.cfg
        self.index = IndexService(cfg.index_dir, cfg.max_hash_slot_num, cfg.max_index_num)
        self.index.load()
        start = min(store.checkpoint.index_flushed, store.commit_pos)
        # Index pages written after the last index flush may be torn after a power loss:
        # cut back to what the checkpoint says is on disk and rebuild from there.
        rebuild = self.index.truncate_after(start)
        if rebuild is not None:
            start = min(start, rebuild)
        self.pos = max(start, store.cb.ctl.pos.min_pos)
        self.flushed_upto = self.pos
        self._last_flush = time.monotonic()
        self._last_busy = 0.0
        self.disk_full = False   # held back by a full disk (said once)
        self.failed = False      # an index flush failed: no more indexing (the store is read-only)

    def stop(self, timeout: float | None = None) -> bool:
        """Stop, then flush and close the index (once: a second stop only returns True)."""
        was_running = self.running
        if not super().stop(timeout):
            return False
        if was_running:
            self._flush()
            self.index.close()
        return True

    def _flush(self) -> None:
        if self.failed:
            return
        upto = self.pos
        try:
            self.index.flush()
        except OSError as e:
            self.failed = True
            self.store.mark_read_only(e.errno or errno.EIO, "msync of the index")
            return
        self.flushed_upto = upto

    def wait_until(self, pos: int, timeout: float = 5.0) -> bool:
        """Tests and queries: wait until everything below ``pos`` is indexed."""
        deadline = time.monotonic() + timeout
        while self.pos < pos and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.pos >= pos

    def round(self) -> float | None:
        return self.run_once()  # a held-back round asks for its own, longer wait

    def run_once(self) -> float | None:
        if self.failed:
            return DISK_FULL_RETRY_S
        commit = self.store.commit_pos
        if commit > self.pos:
            self._last_busy = time.monotonic()
            try:
                self._dispatch_to(commit)
            except DiskFull as e:
                if not self.disk_full:
                    self.disk_full = True
                    log.error("indexing held back at commit-log offset %d: %s; messages are still stored, queries "
                              "by key miss the newer ones until space returns (retrying every %.0f s)",
                              self.pos, e, DISK_FULL_RETRY_S)
                return DISK_FULL_RETRY_S
            if self.disk_full:
                self.disk_full = False
                log.warning("indexing resumed: the disk has room; caught up to commit-log offset %d", self.pos)
        if time.monotonic() - self._last_flush >= FLUSH_EVERY_S:
            self._flush()
            self._last_flush = time.monotonic()

    def sleep(self, seconds: float) -> None:
        # While appends keep coming, poll every BUSY_POLL_S instead of sleeping on the
        # store's futex: a registered waiter makes every append pay a wake-up syscall
        # (and this process a context switch). Idle for BUSY_FOR_S: sleep on the futex
        # (stop then takes up to IDLE_WAIT_S, as a futex wait is not interrupted).
        if seconds > BUSY_POLL_S or time.monotonic() - self._last_busy < BUSY_FOR_S:
            super().sleep(seconds)
        else:
            self.store.wait(self.pos, IDLE_WAIT_S)

    def _dispatch_to(self, commit: int) -> None:
        """Index everything below ``commit``: one C run per commit-log file, in slices so a
        stop is seen within a few milliseconds."""
        cl = self.store.commitlog
        fsize = cl.file_size
        while self.pos < commit and not self.stopping:
            idx, off = divmod(self.pos, fsize)
            base = idx * fsize
            limit = min(commit - base, fsize)
            done, blank = self.index.build_records(cl.map(idx), base, off, min(limit, off + _SLICE), limit)
            self.pos = base + fsize if blank else base + done
