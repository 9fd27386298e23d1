"""The index service: the directory of IndexFiles behind QUERY_MESSAGE and message lookup by key.

RocketMQ's ``IndexService`` (``store/index/IndexService.java``), reshaped for shmq: the
dispatch step calls ``build`` for every commit-log record in offset order, brokers and local
clients call ``query``, recovery calls ``truncate_after``, the clean-expired task
``delete_expired``, the flush task ``flush``.

Directory ``store/index/``: files named by their creation time, ``yyyyMMddHHmmssSSS`` in local
time (UtilAll.timeMillisToHumanString). Name order is creation order is commit-log order: a new
name is forced past the newest existing one when the clock has not moved (two files in one
millisecond) or went backwards, so ``load`` may simply sort names. Every file but the newest is
full; the newest takes the puts.

Keys: ``topic#UNIQ_KEY`` and ``topic#<word>`` for each non-empty space-separated word of KEYS
(buildIndex). Records skipped, as RocketMQ skips them: rollback-type transaction records
(sysflag bits 2-3 == 0xC), and records below the newest file's endPhyOffset (already indexed:
dispatch after recovery replays from a checkpoint). The test is ``offset < endPhyOffset``, not
``<=``: endPhyOffset is the *start* of the newest indexed record, which may be only partly
indexed (a crash or a checkpoint between two of its keys), so that record is indexed again,
and queries drop the duplicate offsets.

Threads: one writer (``build``, ``truncate_after``) and any number of readers (``query``).
``_lock`` guards the file list and every unmap: queries hold it while they walk the mappings,
so no file is closed under a reader. Puts into the newest file take no lock (IndexFile's
publication order makes them safe for concurrent readers); only a roll-over does.

Processes: one process owns the index (the supervisor builds it); any other process (a broker
worker answering QUERY_MESSAGE) opens ``IndexService(..., readonly=True)``. Every read-only
query first ``refresh``es: it re-reads the headers, maps files the owner created and unmaps the
ones it deleted (the owner only ever unlinks whole files, so a mapping never loses its pages).

Durability (for the checkpoint): read ``last_phy_offset`` *before* ``flush()``; once the flush
returns, every record below that offset is durably indexed (the record *at* it may be partial,
and is re-indexed by a replay from it, see above).
"""
from __future__ import annotations

import datetime
import os
import re
import threading
import time

from shmq.errors import StoreClosed, StoreCorrupt, StoreError, StoreReadOnly
from shmq.native import ffi as _ffi, lib as _lib

from . import faults
from .index_file import DEFAULT_HASH_SLOT_NUM, DEFAULT_INDEX_NUM, IndexFile

__all__ = ["IndexService", "index_file_name", "TRANSACTION_ROLLBACK_TYPE"]

# MessageSysFlag: the transaction type is bits 2-3; rollback records are never indexed.
TRANSACTION_TYPE_MASK = 0xC
TRANSACTION_ROLLBACK_TYPE = 0xC
KEY_SEPARATOR = " "                  # MessageConst.KEY_SEPARATOR
#: _prefault: a writable file's slot pages are faulted in at once after puts numbering a
#: quarter of them (a new file: at 10,000 msgs/s ~0.1 s after its first put) ...
PREFAULT_AFTER = 4
#: ... and after an msync only if the period before it had 4x its slot pages in puts
BUSY_PERIOD = 4
_NAME = re.compile(r"^[0-9]{17}$")


def index_file_name(ms: int) -> str:
    """``yyyyMMddHHmmssSSS`` of an epoch-milliseconds time, in local time as RocketMQ's
    UtilAll.timeMillisToHumanString renders it."""
    return time.strftime("%Y%m%d%H%M%S", time.localtime(ms // 1000)) + f"{ms % 1000:03d}"


def _name_after(name: str) -> str:
    """The name one millisecond after ``name``, as wall-clock text (no time zone arithmetic:
    only the order of names matters, and this keeps it even across a DST change)."""
    t = datetime.datetime.strptime(name[:14], "%Y%m%d%H%M%S")
    t += datetime.timedelta(milliseconds=int(name[14:17]) + 1)
    return t.strftime("%Y%m%d%H%M%S") + f"{t.microsecond // 1000:03d}"


class IndexService:
    """The index files of one store directory. Call ``load()`` once before use."""

    def __init__(self, directory: str | os.PathLike, hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
                 index_num: int = DEFAULT_INDEX_NUM, *, readonly: bool = False):
        self.directory = os.fspath(directory)
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.readonly = readonly
        # Oldest first, in commit-log order. Changed only under _lock; the writer may read
        # the last element without it (only the writer itself appends or removes the newest).
        self._files: list[IndexFile] = []
        self._lock = threading.Lock()
        self._closed = False
        # Set by a failed msync: the index is no longer known to match the disk (style rule:
        # never retry a failed flush), so no more puts or flushes are attempted.
        self._failed: BaseException | None = None

    # ---- lifetime ---------------------------------------------------------------------------
    def load(self) -> None:
        """Create the directory if needed and open its index files in name order. Other names
        (a stray temp file) are ignored; a file of the wrong size raises StoreCorrupt."""
        self._check_open()
        if self.readonly:
            with self._lock:
                self._refresh_locked()
            return
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        names = sorted(n for n in os.listdir(self.directory) if _NAME.match(n))
        if names and os.path.getsize(os.path.join(self.directory, names[-1])) == 0:
            # the owner was killed between creating the newest IndexFile and sizing it: it never
            # held an entry (the index is rebuilt from the CommitLog past the checkpoint)
            os.unlink(os.path.join(self.directory, names.pop()))
        opened: list[IndexFile] = []
        try:
            for n in names:
                opened.append(IndexFile.open(os.path.join(self.directory, n),
                                             self.hash_slot_num, self.index_num))
        except BaseException:
            for f in opened:
                f.close()
            raise
        with self._lock:
            for f in self._files:
                f.close()
            self._files = opened

    def refresh(self) -> None:
        """Read-only services: catch up with the owning process (``query`` does it itself).
        A no-op for the owner, whose state is the truth."""
        if self.readonly:
            with self._lock:
                self._check_open()
                self._refresh_locked()

    def _refresh_locked(self) -> None:
        try:
            names = sorted(n for n in os.listdir(self.directory) if _NAME.match(n))
        except FileNotFoundError:
            names = []
        present = set(names)
        kept = []
        for f in self._files:
            if f.name in present:
                kept.append(f)
            else:
                f.close()                     # deleted by the owner: expired or truncated
        for f in kept:
            f.reload_header()
        last = kept[-1].name if kept else ""
        for n in names:
            if n <= last:
                continue                      # already mapped (the owner never adds older names)
            try:
                kept.append(IndexFile.open(os.path.join(self.directory, n), self.hash_slot_num,
                                           self.index_num, readonly=True))
            except (FileNotFoundError, StoreCorrupt):
                # Deleted since listdir, or still being created (not yet fallocated to size):
                # stop here so the list keeps no gap; the next refresh maps it.
                break
        self._files = kept

    def close(self) -> None:
        """Flush what is dirty (unless a flush already failed) and unmap everything. Call with
        the writer stopped. Idempotent; afterwards every call raises StoreClosed."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            files, self._files = self._files, []
        try:
            if self._failed is None and not self.readonly:
                for f in files:
                    if f.dirty:
                        f.flush()
        finally:
            for f in files:
                f.close()

    def __enter__(self) -> "IndexService":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosed(f"index service {self.directory}")

    def _check_writer(self) -> None:
        self._check_open()
        if self.readonly:
            raise StoreError(f"index service {self.directory} is open read-only")
        if self._failed is not None:
            raise StoreReadOnly(f"index service {self.directory}: an earlier flush failed: "
                                f"{self._failed}")

    # ---- state --------------------------------------------------------------------------------
    @property
    def last_phy_offset(self) -> int:
        """endPhyOffset of the newest file (0 with no file): where a replay must start. In a
        read-only service, as of the last ``refresh``/``query``."""
        files = self._files
        return files[-1].end_phy_offset if files else 0

    @property
    def last_timestamp(self) -> int:
        """endTimestamp of the newest file (QueryOffsetResult.indexLastUpdateTimestamp)."""
        files = self._files
        return files[-1].end_timestamp if files else 0

    def files(self) -> list[IndexFile]:
        """A snapshot of the open files, oldest first (for dump tools and tests)."""
        with self._lock:
            return list(self._files)

    # ---- writing ----------------------------------------------------------------------------
    def build(self, topic: str, keys: str | None, uniq_key: str | None, phy_offset: int,
              store_timestamp_ms: int, sysflag: int) -> None:
        """Index one commit-log record (IndexService.buildIndex). Call in commit-log order from
        the one writer thread. The dispatcher uses ``build_records`` (the same rules in C, over
        a run of records); this one is the readable statement of those rules, for tools and
        for the test that holds the C writer to it byte for byte. Raises DiskFull when a new file cannot be created; the keys of
        the record put so far stay, and a retry of the same record re-indexes it whole."""
        f = self._writable_file()
        if phy_offset < f.end_phy_offset:
            return                            # indexed before a restart (see module doc)
        if sysflag & TRANSACTION_TYPE_MASK == TRANSACTION_ROLLBACK_TYPE:
            return
        prefix = topic + "#"
        # ``is not None``, not truthiness: RocketMQ indexes an empty UNIQ_KEY as "topic#".
        if uniq_key is not None:
            f = self._put(f, prefix + uniq_key, phy_offset, store_timestamp_ms)
        if keys:
            for word in keys.split(KEY_SEPARATOR):
                if word:
                    f = self._put(f, prefix + word, phy_offset, store_timestamp_ms)

    def build_records(self, log, base_phy_offset: int, off: int, end: int, limit: int) -> tuple[int, bool]:
        """Index every record that starts in ``log[off:end)`` and ends by ``limit`` (a commit-log
        file mapping whose byte 0 is at ``base_phy_offset``; ``limit``: the commit position in
        it), as ``build`` does each, in one C call per index file
        (shmq_index_records). Returns (the offset after the last record done, whether the run
        stopped at the file's BLANK filler). Raises StoreCorrupt when no record is at an
        offset, DiskFull when a new index file cannot be created."""
        offp = _ffi.new("uint64_t *", off)
        skip = _ffi.new("uint32_t *", 0)
        logp = _ffi.from_buffer("uint8_t[]", log)
        try:
            while True:
                f = self._writable_file()
                idx = _ffi.from_buffer("uint8_t[]", f.mapping())
                try:
                    rc = _lib.shmq_index_records(idx, f.hash_slot_num, f.index_num, logp, base_phy_offset, offp,
                                                 end, limit, skip)
                finally:
                    _ffi.release(idx)
                f.reload_header()
                f.dirty = True
                if rc != _lib.SHMQ_IDX_FULL:
                    break                     # full: the next _writable_file rolls
        finally:
            _ffi.release(logp)
        self._prefault(f)
        if rc == _lib.SHMQ_EINVAL:
            raise StoreCorrupt(f"no record at commit-log offset {base_phy_offset + offp[0]}")
        return offp[0], rc == _lib.SHMQ_IDX_BLANK

    def _prefault(self, f: IndexFile) -> None:
        """Fault the writable file's slot pages in at once (IndexFile.prefault_slots) once puts
        numbering 1/PREFAULT_AFTER of its slot pages came since its last msync (so a file that
        takes a handful of keys never does), and after an msync only when the period before it
        had BUSY_PERIOD times as many (~98 % of the pages dirtied anyway: the msync after writes
        little more than it would have)."""
        if f.slots_mapped:
            return
        pages = f.slot_pages()
        if (f.index_count - f.count_at_flush) * PREFAULT_AFTER >= pages and \
                (f.last_period < 0 or f.last_period >= BUSY_PERIOD * pages):
            f.prefault_slots()

    def _put(self, f: IndexFile, key: str, phy_offset: int, ts: int) -> IndexFile:
        while not f.put_key(key, phy_offset, ts):
            f = self._roll(f)                 # a fresh file always has room (index_num >= 2)
        return f

    def _writable_file(self) -> IndexFile:
        """The newest file, or a new one when there is none or it is full
        (getAndCreateLastIndexFile)."""
        self._check_writer()
        files = self._files
        if files and not files[-1].is_full():
            return files[-1]
        return self._roll(files[-1] if files else None)

    def _roll(self, prev: IndexFile | None) -> IndexFile:
        """Create the next file. It starts from ``prev``'s end offset and time (RocketMQ's
        constructor arguments), so an empty new file still reports where indexing stands and
        its time range starts where the previous one ends."""
        now = index_file_name(time.time_ns() // 1_000_000)
        name = now if prev is None or now > prev.name else _name_after(prev.name)
        while True:
            try:
                f = IndexFile.create(os.path.join(self.directory, name), self.hash_slot_num,
                                     self.index_num,
                                     prev.end_phy_offset if prev is not None else 0,
                                     prev.end_timestamp if prev is not None else 0)
                break
            except FileExistsError:           # not loaded, or made by another process
                name = _name_after(name)
        # The directory entry is made durable now, once per file; the contents follow with
        # flush(). ``prev`` stays dirty until then (RocketMQ flushes it in a side thread).
        dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            faults.dir_synced(self.directory)
            os.fsync(dfd)
        finally:
            os.close(dfd)
        with self._lock:
            if self._closed:
                f.close()
                self._check_open()
            self._files.append(f)
        return f

    # ---- reading ----------------------------------------------------------------------------
    def query(self, topic: str, key: str, max_num: int, begin_ts: int, end_ts: int) -> list[int]:
        """Commit-log offsets of records indexed under ``topic#key`` and stored in
        [begin_ts, end_ts] (ms, read back at whole seconds), newest first, each once, at most
        ``max_num`` (IndexService.queryOffset; RocketMQ also caps ``max_num`` at
        maxMsgsNumBatch = 64, which is the caller's to apply). By key hash only: the caller
        checks each record's keys."""
        out: list[int] = []
        seen: set[int] = set()
        if max_num <= 0:
            return out
        full_key = topic + "#" + key
        with self._lock:
            self._check_open()
            if self.readonly:
                self._refresh_locked()
            for f in reversed(self._files):
                if f.is_time_matched(begin_ts, end_ts):
                    f.select_into(full_key, out, seen, max_num, begin_ts, end_ts)
                # Older files hold older records only.
                if f.begin_timestamp < begin_ts or len(out) >= max_num:
                    break
        return out

    # ---- recovery and cleanup ----------------------------------------------------------------
    def truncate_after(self, phy_offset: int) -> int | None:
        """Forget every entry for commit-log offsets >= ``phy_offset`` (the recovered end of
        the log, where the next record will go). Call with the writer stopped.

        Files that begin at or past ``phy_offset`` are deleted. If the newest remaining file
        still ends at or past it (">=": its endPhyOffset is the start of a record that no
        longer exists), it is deleted too and its beginPhyOffset is returned: the caller must
        re-dispatch the records in [returned offset, phy_offset) to ``build``. Returns None
        when nothing needs rebuilding beyond the caller's usual replay from
        ``last_phy_offset``.

        After a kill -9 the page cache holds every put, so the recovered log end is the right
        argument. After a power loss, pages written since the last flush may be missing or
        stale on disk (a header ahead of its entries); pass the checkpointed index offset
        (``min(log end, index checkpoint)``) to rebuild everything past the last flush, as
        RocketMQ does by destroying files newer than its index checkpoint."""
        with self._lock:
            self._check_writer()
            files = self._files
            while files and files[-1].begin_phy_offset >= phy_offset:
                files.pop().destroy()
            if files and files[-1].end_phy_offset >= phy_offset:
                f = files.pop()
                f.destroy()
                # Every older file ends at or below this file's begin, so it is intact.
                return f.begin_phy_offset
            return None

    def delete_expired(self, min_phy_offset: int) -> int:
        """Delete, oldest first, the files whose endPhyOffset < ``min_phy_offset`` (the
        commit log's new minimum offset), never the newest (deleteExpiredFile). They are
        unlinked whole, never truncated. Returns how many were deleted."""
        with self._lock:
            self._check_writer()
            files = self._files
            n = 0
            while len(files) > 1 and files[0].end_phy_offset < min_phy_offset:
                files.pop(0).destroy()
                n += 1
            return n

    def flush(self) -> None:
        """msync every file with unflushed puts. A failure (EIO) marks the service failed:
        no more puts or flushes, StoreReadOnly from then on; the error propagates."""
        with self._lock:
            # Under the lock: a concurrent delete must not unmap a file being synced.
            self._check_writer()
            for f in self._files:
                if f.dirty:
                    try:
                        f.flush()
                    except OSError as e:
                        self._failed = e
                        raise
