"""ConsumeQueue files: per (topic, queue id), fixed 20-byte entries, so entry n is found by
arithmetic (layout in shmq/native/layout.h):

    | commitlog offset i64 | record size i32 | tag code i64 |   big-endian

Entry n is at byte (n mod E) * 20 of the file starting at byte (n div E) * E * 20, where E is
``cq_entries_per_file`` (300,000). Entries are written by the C append under the lock before
the queue's next offset is published; an all-zero entry is an empty one (a record at
commitlog offset 0 still has a non-zero size).

Files are sparse (files.create_sparse): disk use follows the entries stored, not the number of
queues. A page is allocated by write(2) before anything stores into it through a mapping (the
C append's ``cq_reserve``; ``write_entry`` here), so a full disk is an error, never SIGBUS.
"""
from __future__ import annotations

import errno
import mmap
import os
import re
import struct

from shmq.errors import DiskFull

from . import faults, files
from .config import StoreConfig

ENTRY = struct.Struct(">qiq")
#: an entry in hex: the commit-log offset (16 digits), then size and tag code (24)
_PHYS_HEX = re.compile(r"([0-9A-F]{16})[0-9A-F]{24}")
ENTRY_SIZE = 20
RESERVE_STEP = 64 * 1024   # write_entry allocates the 64 KiB around the entry it writes


class ConsumeQueue(files.MappedSet):
    def __init__(self, cfg: StoreConfig, topic: str, queue_id: int):
        self.cfg = cfg
        self.topic = topic
        self.queue_id = queue_id
        self.per_file = cfg.cq_entries_per_file
        self.file_bytes = self.per_file * ENTRY_SIZE
        self.dir = os.path.join(cfg.consumequeue_dir, topic, str(queue_id))
        self._reserved: dict[int, set[int]] = {}   # write_entry: RESERVE_STEP chunks allocated
        self._named_upto = -1  # files up to this index have a durable name (flush_range)
        files.MappedSet.__init__(self)

    def path(self, file_index: int) -> str:
        return os.path.join(self.dir, files.name_of(file_index * self.file_bytes))

    def file_indexes(self) -> list[int]:
        return [start // self.file_bytes for start in files.list_numbered(self.dir)
                if start % self.file_bytes == 0]

    def map(self, file_index: int, *, create: bool = False) -> mmap.mmap | None:
        mm = self._maps.get(file_index)
        if mm is not None:
            return mm
        with self._lock:
            mm = self._maps.get(file_index)
            if mm is None:
                path = self.path(file_index)
                try:
                    mm = files.map_file(path, self.file_bytes)
                except FileNotFoundError:
                    if not create:
                        return None
                    files.create_sparse(path, self.file_bytes, self.cfg.file_mode, self.cfg.group)
                    mm = files.map_file(path, self.file_bytes)
                self._maps[file_index] = mm
            return mm

    def entry(self, offset: int) -> tuple[int, int, int] | None:
        """(commitlog offset, size, tag code), or None when the file is gone or the entry empty."""
        fi, n = divmod(offset, self.per_file)
        mm = self.map(fi)
        if mm is None:
            return None
        e = ENTRY.unpack_from(mm, n * ENTRY_SIZE)
        return e if e[1] > 0 else None

    def entries(self, offset: int, count: int):
        """Up to ``count`` entries from ``offset`` within one file: (offset, phys, size, tag)."""
        fi, n = divmod(offset, self.per_file)
        mm = self.map(fi)
        if mm is None:
            return
        end = min(self.per_file, n + count)
        for i in range(n, end):
            phys, size, tag = ENTRY.unpack_from(mm, i * ENTRY_SIZE)
            if size <= 0:
                return
            yield offset + (i - n), phys, size, tag

    def phys_hex(self, offset: int, count: int) -> list[str]:
        """The commit-log offsets of ``count`` published entries from ``offset``, as 16 hex
        digits each (a batch's offset msgIds), read without a Python loop per entry."""
        out: list[str] = []
        while count > 0:
            fi, n = divmod(offset, self.per_file)
            take = min(count, self.per_file - n)
            mm = self.map(fi)
            if mm is None:
                break
            out += _PHYS_HEX.findall(mm[n * ENTRY_SIZE:(n + take) * ENTRY_SIZE].hex().upper())
            offset += take
            count -= take
        return out

    def forget(self, index: int) -> None:
        self._reserved.pop(index, None)
        files.MappedSet.forget(self, index)

    def create_first(self) -> bool:
        """Create the queue's first file (sparse, nothing allocated) unless the queue has files:
        done when a topic is created, so the first message to the queue finds its file."""
        if self.file_indexes():
            return False
        return files.create_sparse(self.path(0), self.file_bytes, self.cfg.file_mode, self.cfg.group)

    def write_entry(self, offset: int, phys: int, size: int, tag: int) -> None:
        """Recovery and a slave's replica writer only (no C append writes the queue meanwhile):
        the append writes entries in C. DiskFull when the page cannot be allocated."""
        fi, n = divmod(offset, self.per_file)
        mm = self.map(fi, create=True)
        done = self._reserved.setdefault(fi, set())
        for chunk in {n * ENTRY_SIZE // RESERVE_STEP, ((n + 1) * ENTRY_SIZE - 1) // RESERVE_STEP}:
            if chunk not in done:
                self._reserve(fi, chunk)
                done.add(chunk)
        ENTRY.pack_into(mm, n * ENTRY_SIZE, phys, size, tag)

    def _reserve(self, fi: int, chunk: int) -> None:
        """Allocate RESERVE_STEP bytes number ``chunk`` of file ``fi`` by writing its own bytes
        back (holes read as zeros): nothing changes but the allocation. Safe only with no other
        writer of the file, which is why the C append reserves differently (zeros past its
        last published entry, under the lock)."""
        start = chunk * RESERVE_STEP
        stop = min(self.file_bytes, start + RESERVE_STEP)
        path = self.path(fi)
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            faults.hit("preallocate", path)
            data = os.pread(fd, stop - start, start)
            if os.pwrite(fd, data, start) != len(data):
                raise OSError(errno.ENOSPC, "short write")
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise DiskFull.at(path, stop - start, e.strerror) from e
            raise
        finally:
            os.close(fd)

    def clear_from(self, offset: int) -> None:
        """Recovery only: zero every entry from ``offset`` on (files past it are deleted).
        Only allocated ranges are written (SEEK_DATA/SEEK_HOLE): zeros into a hole would
        allocate the whole sparse file."""
        fi, n = divmod(offset, self.per_file)
        deleted = False
        for idx in self.file_indexes():
            if idx > fi:
                self.delete_file(idx)
                deleted = True
            elif idx == fi:
                _zero_data(self.path(idx), n * ENTRY_SIZE, self.file_bytes)
        # Durable at once: a cut that a second power cut undid would leave entries pointing
        # into the records appended after this recovery (the flusher syncs only below the
        # queue's next offset).
        self.flush_range(offset, offset + 1)
        if deleted:
            files.fsync_dir(self.dir)

    def has_entries_from(self, offset: int) -> bool:
        """Whether any entry at or past ``offset`` is not empty (recovery after a crash). Only
        the file's allocated ranges are read: a hole holds zeros, and reading every queue's
        whole 6 MB file was most of a crashed start (2,000 queues: 18 of 20 s)."""
        fi, n = divmod(offset, self.per_file)
        if any(i > fi for i in self.file_indexes()):
            return True
        mm = self.map(fi)
        if mm is None:
            return False
        step = 1 << 20
        fd = os.open(self.path(fi), os.O_RDONLY | os.O_CLOEXEC)
        try:
            for data, hole in _data_ranges(fd, n * ENTRY_SIZE, self.file_bytes):
                for p in range(data, hole, step):
                    chunk = mm[p:min(p + step, hole)]
                    if chunk.count(0) != len(chunk):
                        return True
        finally:
            os.close(fd)
        return False

    def last_offset(self) -> int:
        """Number of entries (the next offset) found in the files: entries are dense from the
        queue's start, so the first empty entry of the last file is found by bisection."""
        idxs = self.file_indexes()
        while idxs:
            fi = idxs[-1]
            mm = self.map(fi)
            lo, hi = 0, self.per_file
            while lo < hi:
                mid = (lo + hi) // 2
                if ENTRY.unpack_from(mm, mid * ENTRY_SIZE)[1] > 0:
                    lo = mid + 1
                else:
                    hi = mid
            if lo > 0 or len(idxs) == 1:
                return fi * self.per_file + lo
            idxs.pop()  # an empty trailing file (created ahead): look at the one before
        return 0

    def first_at_or_after(self, phys: int, lo: int, hi: int) -> int:
        """The first queue offset in [lo, hi) whose entry points at or past commit-log offset
        ``phys`` (entries are in commit-log order), hi when none does."""
        while lo < hi:
            mid = (lo + hi) // 2
            e = self.entry(mid)
            if e is not None and e[0] >= phys:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def first_file_offset(self) -> int:
        idxs = self.file_indexes()
        return idxs[0] * self.per_file if idxs else 0

    def flush_range(self, start: int, end: int) -> None:
        """fdatasync the files holding entries [start, end): they may have been written by
        other processes, so the file, not our mapping, is what is synced."""
        if end <= start:
            return
        for fi in range(start // self.per_file, (end - 1) // self.per_file + 1):
            try:
                fd = os.open(self.path(fi), os.O_RDWR | os.O_CLOEXEC)
            except FileNotFoundError:
                continue
            try:
                faults.before_sync("msync", self.path(fi))
                os.fdatasync(fd)
            finally:
                os.close(fd)
            if fi > self._named_upto:
                # the file's name and its topic / queue directories, once: the checkpoint
                # that follows says these entries are on disk
                files.make_names_durable(self.path(fi), os.path.dirname(self.cfg.consumequeue_dir))
                self._named_upto = fi


def _data_ranges(fd: int, start: int, stop: int):
    """The allocated ranges [data, hole) of [start, stop) of the open file ``fd``
    (SEEK_DATA/SEEK_HOLE). On a filesystem without them the whole file counts as data."""
    pos = start
    while pos < stop:
        try:
            data = os.lseek(fd, pos, os.SEEK_DATA)
        except OSError as e:
            if e.errno == errno.ENXIO:
                return  # only holes from pos on
            raise
        if data >= stop:
            return
        hole = min(stop, os.lseek(fd, data, os.SEEK_HOLE))
        yield data, hole
        pos = hole


def _zero_data(path: str, start: int, stop: int) -> None:
    """Write zeros over the allocated ranges of [start, stop) of ``path``, leaving holes holes."""
    fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    try:
        for data, hole in _data_ranges(fd, start, stop):
            while data < hole:
                n = min(hole - data, 1 << 20)
                data += os.pwrite(fd, bytes(n), data)
    finally:
        os.close(fd)
