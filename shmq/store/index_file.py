"""One IndexFile: RocketMQ's hash index from message key to commit-log offset.

The file is RocketMQ 4.x's ``store/index/<yyyyMMddHHmmssSSS>`` byte for byte
(``IndexFile.java``, ``IndexHeader.java``, described below), so a RocketMQ
broker can read an shmq store and the other way round. All integers are big-endian and signed.
Because the format is RocketMQ's, it has no magic or fingerprint header (style rule 2 yields
to compatibility); ``IndexFile.open`` checks the file size against the configured geometry.

    offset                          size  field
    ------------------------------  ----  ---------------------------------------------------
    0                                  8  beginTimestamp  store time (ms) of entry 1
    8                                  8  endTimestamp    store time (ms) of the newest entry
    16                                 8  beginPhyOffset  commit-log offset of entry 1
    24                                 8  endPhyOffset    commit-log offset of the newest entry
    32                                 4  hashSlotCount   slots that ever became non-empty
    36                                 4  indexCount      next entry number; starts at 1
    40 + s*4                           4  slot s          newest entry number in slot s, 0 = none
    40 + hashSlotNum*4 + n*20          4    keyHash       |String.hashCode(key)|, MIN_VALUE -> 0
                                  +4   8    phyOffset     commit-log offset of the record
                                  +12  4    timeDiff      (storeTimestamp - beginTimestamp)/1000 s,
                                                          truncated, clamped to 0..2^31-1
                                  +16  4    prevIndex     previous entry of the slot, 0 ends it

Entry 0 is never used: entry number 0 means "no entry", which is why indexCount starts at 1
and a file with ``indexNum`` entries holds ``indexNum - 1`` keys ("full" is
``indexCount >= indexNum``). Slot of a key: ``keyHash % hashSlotNum``. Each slot heads a chain
through ``prevIndex`` from its newest entry to its oldest, so a chain is in put order reversed
and (store timestamps being monotonic) in time order reversed; a query stops at the first
entry older than the asked range.

Publication order (one writer, lock-free readers in any thread or process): the entry is
written first, then the slot is pointed at it, then indexCount is advanced. A reader trusts a
slot value only when it is in ``1..indexCount`` and follows ``prevIndex`` only downwards, so
whatever point a concurrent put, or a kill -9, stopped at, readers see the key either fully
indexed or not at all. Slots and header fields are stored and loaded as whole aligned words
(native-order ``struct`` of a byte-swapped value: one memcpy of 4 or 8 bytes, a single store on
x86-64 and arm64), so a reader in another process never sees a torn count or slot. x86-64 keeps
stores in program order, which the publication order relies on across processes (no Python
fence exists); on a weakly ordered CPU a reader in another process may briefly see a slot
before its entry, reads a zeroed entry, and the key-hash check drops it.

Deviations from RocketMQ, each for a reason:
- the first entry of a file stores timeDiff 0. RocketMQ computes it against the previous
  file's endTimestamp (passed to the constructor) and only then resets beginTimestamp to the
  entry's own time, so entry 1 of a rolled file reads back later than it was stored;
- a chain is followed only to strictly smaller entry numbers (RocketMQ stops only on a self
  loop), so a corrupt file cannot make a query loop forever, and a put ignores a slot naming
  the entry it is about to write (left by a put that died halfway) instead of chaining the
  entry to itself;
- a query returns each commit-log offset once, and ``max_num`` counts distinct offsets (RocketMQ
  repeats an offset indexed twice, e.g. ``KEYS="a a"`` or a record re-dispatched after recovery).
"""
from __future__ import annotations

import errno
import mmap
import os
import struct
from typing import Iterable

from shmq.errors import DiskFull, StoreClosed, StoreCorrupt, StoreError
from shmq.message.javahash import java_string_hash

from . import faults, files

__all__ = [
    "IndexFile", "index_key_hash", "file_size",
    "HEADER_SIZE", "HASH_SLOT_SIZE", "INDEX_SIZE", "INVALID_INDEX",
    "DEFAULT_HASH_SLOT_NUM", "DEFAULT_INDEX_NUM",
]

HEADER_SIZE = 40
HASH_SLOT_SIZE = 4
INDEX_SIZE = 20
INVALID_INDEX = 0          # entry number meaning "none"; entry 0 is never written
DEFAULT_HASH_SLOT_NUM = 5_000_000     # MessageStoreConfig.maxHashSlotNum
DEFAULT_INDEX_NUM = 20_000_000        # MessageStoreConfig.maxIndexNum (5,000,000 * 4)

# Header field offsets (IndexHeader.java).
OFF_BEGIN_TIMESTAMP = 0
OFF_END_TIMESTAMP = 8
OFF_BEGIN_PHY_OFFSET = 16
OFF_END_PHY_OFFSET = 24
OFF_HASH_SLOT_COUNT = 32
OFF_INDEX_COUNT = 36

_HEADER = struct.Struct(">qqqqii")
_ENTRY = struct.Struct(">iqii")       # keyHash, phyOffset, timeDiff, prevIndex
_BE32 = struct.Struct(">i")
_BE64 = struct.Struct(">q")
_NATIVE32 = struct.Struct("@I")       # "@": native mode copies the word with one memcpy
_NATIVE64 = struct.Struct("@Q")
_INT32_MIN = -0x80000000
_INT32_MAX = 0x7FFFFFFF

assert _HEADER.size == HEADER_SIZE and _ENTRY.size == INDEX_SIZE


def _store32(mm: mmap.mmap, off: int, value: int) -> None:
    """Store a big-endian int32 at a 4-aligned offset as one word (see module doc)."""
    _NATIVE32.pack_into(mm, off, _NATIVE32.unpack(_BE32.pack(value))[0])


def _store64(mm: mmap.mmap, off: int, value: int) -> None:
    _NATIVE64.pack_into(mm, off, _NATIVE64.unpack(_BE64.pack(value))[0])


def _load32(mm: mmap.mmap, off: int) -> int:
    return _BE32.unpack(_NATIVE32.pack(*_NATIVE32.unpack_from(mm, off)))[0]


def _load64(mm: mmap.mmap, off: int) -> int:
    return _BE64.unpack(_NATIVE64.pack(*_NATIVE64.unpack_from(mm, off)))[0]


def index_key_hash(key: str) -> int:
    """IndexFile.indexKeyHashMethod: ``Math.abs(key.hashCode())``, and 0 for Integer.MIN_VALUE
    (whose Math.abs is itself, still negative). Always in ``0..2^31-1``; stored in the entry."""
    h = java_string_hash(key)
    return 0 if h == _INT32_MIN else abs(h)


def file_size(hash_slot_num: int, index_num: int) -> int:
    return HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE + index_num * INDEX_SIZE


def _check_geometry(hash_slot_num: int, index_num: int) -> None:
    # index_num >= 2: a file must hold at least one entry (entry 0 is reserved), otherwise a
    # writer that rolls to a fresh file because the old one is full would roll forever.
    if not 1 <= hash_slot_num <= _INT32_MAX or not 2 <= index_num <= _INT32_MAX:
        raise ValueError(f"bad index geometry: hash_slot_num={hash_slot_num} index_num={index_num}")


class IndexFile:
    """One memory-mapped index file. One writer thread (``put_key``) and any number of reader
    threads (``select_phy_offsets``); ``close`` must not race either (IndexService's lock sees
    to it).

    The header is cached in attributes, written through to the mapping on every change (as
    IndexHeader's AtomicLongs are); the cache is what readers consult, so a reader never
    decodes a header that is being rewritten.
    """

    __slots__ = ("path", "hash_slot_num", "index_num", "readonly", "_mm", "_entries_at",
                 "_begin_timestamp", "_end_timestamp", "_begin_phy_offset", "_end_phy_offset",
                 "_hash_slot_count", "_index_count", "dirty", "slots_mapped", "count_at_flush", "last_period")

    def __init__(self, path: str, mm: mmap.mmap, hash_slot_num: int, index_num: int,
                 readonly: bool = False):
        # Use create() or open(); this only wires an already validated mapping.
        self.path = path
        self.hash_slot_num = hash_slot_num
        self.index_num = index_num
        self.readonly = readonly
        self._mm: mmap.mmap | None = mm
        self._entries_at = HEADER_SIZE + hash_slot_num * HASH_SLOT_SIZE
        self.reload_header()
        # True when the mapping has writes that no flush() has covered yet. Set by the writer
        # after a put, cleared by the flusher before msync, so a put racing the flush leaves
        # it set (one extra msync at worst, never a missed one).
        self.dirty = False
        # prefault_slots' state (the writer's): whether the hash table's pages are mapped
        # writable since the last msync, the entry count at that msync, and the puts of the
        # period before it (-1: not known, a file made or opened since)
        self.slots_mapped = False
        self.count_at_flush = self._index_count
        self.last_period = -1

    # ---- opening ----------------------------------------------------------------------------
    @classmethod
    def create(cls, path: str | os.PathLike, hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
               index_num: int = DEFAULT_INDEX_NUM, begin_phy_offset: int = 0,
               begin_timestamp: int = 0) -> "IndexFile":
        """Create a new file (never overwrites: FileExistsError) of the full size, zeroed.

        ``begin_phy_offset``/``begin_timestamp`` are the previous file's end values, as
        RocketMQ's constructor takes them: they become this file's begin *and* end (when
        positive) until the first put replaces begin, so an empty rolled file still reports
        where the index stands. A full disk raises DiskFull here, never SIGBUS at a later put.
        """
        _check_geometry(hash_slot_num, index_num)
        path = os.fspath(path)
        size = file_size(hash_slot_num, index_num)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        try:
            try:
                os.fchmod(fd, 0o600)          # exactly 0600 whatever the umask took away
                faults.hit("preallocate", path)
                os.posix_fallocate(fd, 0, size)
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    raise DiskFull.at(path, size, e.strerror) from e
                raise
            mm = mmap.mmap(fd, size)          # MAP_SHARED, read-write
        except BaseException:
            os.close(fd)
            try:
                os.unlink(path)
            except OSError:
                pass
            raise
        os.close(fd)                          # the mapping keeps the file referenced
        faults.created(path)
        b, e = max(begin_timestamp, 0), max(begin_phy_offset, 0)
        _HEADER.pack_into(mm, 0, b, b, e, e, 0, 1)
        f = cls(path, mm, hash_slot_num, index_num)
        f.dirty = True
        return f

    @classmethod
    def open(cls, path: str | os.PathLike, hash_slot_num: int = DEFAULT_HASH_SLOT_NUM,
             index_num: int = DEFAULT_INDEX_NUM, readonly: bool = False) -> "IndexFile":
        """Map an existing file. The header does not record the geometry (hashSlotCount is the
        number of used slots, not of slots), so it must be the one the file was created with;
        a file of any other size raises StoreCorrupt. ``readonly``: a reader in a process that
        does not own the index; it calls ``reload_header`` to see the writer's progress."""
        _check_geometry(hash_slot_num, index_num)
        path = os.fspath(path)
        size = file_size(hash_slot_num, index_num)
        fd = os.open(path, (os.O_RDONLY if readonly else os.O_RDWR) | os.O_CLOEXEC)
        try:
            actual = os.fstat(fd).st_size
            if actual != size:
                raise StoreCorrupt(f"index file {path} is {actual} bytes, expected {size} for "
                                   f"hash_slot_num={hash_slot_num} index_num={index_num}")
            mm = mmap.mmap(fd, size, access=mmap.ACCESS_READ if readonly else mmap.ACCESS_WRITE)
        finally:
            os.close(fd)
        f = cls(path, mm, hash_slot_num, index_num, readonly)
        if f._index_count > index_num or f._hash_slot_count < 0:
            f.close()
            raise StoreCorrupt(f"index file {path}: indexCount {f._index_count} exceeds "
                               f"indexNum {index_num} or hashSlotCount is negative")
        return f

    # ---- header -----------------------------------------------------------------------------
    def reload_header(self) -> None:
        """Re-read the header from the mapping (IndexHeader.load): how a reader in another
        process follows the writer. indexCount is read first: everything it covers was
        written before it, and begin is fixed once it exceeds 1."""
        mm = self._map()
        count = _load32(mm, OFF_INDEX_COUNT)
        # A count never written (RocketMQ writes it at the first put or flush) means empty.
        self._index_count = count if count > 0 else 1
        self._hash_slot_count = _load32(mm, OFF_HASH_SLOT_COUNT)
        self._begin_timestamp = _load64(mm, OFF_BEGIN_TIMESTAMP)
        self._end_timestamp = _load64(mm, OFF_END_TIMESTAMP)
        self._begin_phy_offset = _load64(mm, OFF_BEGIN_PHY_OFFSET)
        self._end_phy_offset = _load64(mm, OFF_END_PHY_OFFSET)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    @property
    def begin_timestamp(self) -> int:
        return self._begin_timestamp

    @property
    def end_timestamp(self) -> int:
        return self._end_timestamp

    @property
    def begin_phy_offset(self) -> int:
        return self._begin_phy_offset

    @property
    def end_phy_offset(self) -> int:
        return self._end_phy_offset

    @property
    def hash_slot_count(self) -> int:
        return self._hash_slot_count

    @property
    def index_count(self) -> int:
        """Next entry number (1 in an empty file); the file holds ``index_count - 1`` keys."""
        return self._index_count

    @property
    def closed(self) -> bool:
        return self._mm is None

    def is_full(self) -> bool:
        """IndexFile.isWriteFull: no entry number left below ``index_num``."""
        return self._index_count >= self.index_num

    def is_time_matched(self, begin: int, end: int) -> bool:
        """IndexFile.isTimeMatched: does [begin, end] (ms) overlap this file's time range?"""
        b, e = self._begin_timestamp, self._end_timestamp
        return (begin < b and end > e) or b <= begin <= e or b <= end <= e

    def mapping(self) -> mmap.mmap:
        """The writable mapping, for the C dispatch (IndexService.build_records), which writes
        in the same publication order as ``put_key``; ``reload_header`` after it."""
        if self.readonly:
            raise StoreError(f"index file {self.path} is open read-only")
        return self._map()

    def _map(self) -> mmap.mmap:
        mm = self._mm
        if mm is None:
            raise StoreClosed(f"index file {self.path}")
        return mm

    # ---- writing ----------------------------------------------------------------------------
    def put_key(self, key: str, phy_offset: int, store_timestamp_ms: int) -> bool:
        """Index ``key`` -> ``phy_offset``. False, and nothing written, when the file is full."""
        mm = self._map()
        if self.readonly:
            raise StoreError(f"index file {self.path} is open read-only")
        count = self._index_count
        if count >= self.index_num:
            return False
        key_hash = index_key_hash(key)
        slot_pos = HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE
        prev = _load32(mm, slot_pos)
        if prev <= INVALID_INDEX or prev >= count:
            # A valid slot names an entry older than the one being written. Anything else
            # was left by a put that died between its slot store and its count store (the
            # slot then names entry ``count``, which this put overwrites): treat it as empty
            # rather than chain the entry to itself, as RocketMQ's "> count" check would.
            prev = INVALID_INDEX

        first = count <= 1
        if first:
            # Entry 1 defines the file's begin; set before the time diff is taken, so that
            # entry reads back at its own time (see "Deviations" above).
            self._begin_timestamp = store_timestamp_ms
            self._begin_phy_offset = phy_offset
        begin_ts = self._begin_timestamp
        if begin_ts <= 0:
            time_diff = 0
        else:
            # Whole seconds, truncated as Java's long division does; clamped to int32 >= 0.
            # Python's // floors, but every negative difference is clamped to 0 anyway.
            time_diff = min(max((store_timestamp_ms - begin_ts) // 1000, 0), _INT32_MAX)

        # 1. the entry, 2. the slot, 3. the header counts: see "Publication order" above.
        _ENTRY.pack_into(mm, self._entries_at + count * INDEX_SIZE,
                         key_hash, phy_offset, time_diff, prev)
        _store32(mm, slot_pos, count)
        if first:
            # Before the count: a reader that sees count > 1 may rely on begin.
            _store64(mm, OFF_BEGIN_TIMESTAMP, store_timestamp_ms)
            _store64(mm, OFF_BEGIN_PHY_OFFSET, phy_offset)
        if prev == INVALID_INDEX:
            self._hash_slot_count += 1
            _store32(mm, OFF_HASH_SLOT_COUNT, self._hash_slot_count)
        _store32(mm, OFF_INDEX_COUNT, count + 1)
        self._end_phy_offset = phy_offset
        _store64(mm, OFF_END_PHY_OFFSET, phy_offset)
        self._end_timestamp = store_timestamp_ms
        _store64(mm, OFF_END_TIMESTAMP, store_timestamp_ms)
        # The cached count is advanced last: readers bound their walk by it.
        self._index_count = count + 1
        self.dirty = True
        return True

    # ---- reading ----------------------------------------------------------------------------
    def select_phy_offsets(self, keys: str | Iterable[str], max_num: int,
                           begin_ts: int, end_ts: int) -> list[int]:
        """Commit-log offsets indexed under ``keys`` whose store time (read back at whole-second
        precision, as RocketMQ does) is in [begin_ts, end_ts], newest first per key, at most
        ``max_num``. Matches are by key hash only: colliding keys come back too, and the caller
        checks the record's KEYS/UNIQ_KEY, as RocketMQ's broker does."""
        out: list[int] = []
        seen: set[int] = set()
        for key in ([keys] if isinstance(keys, str) else keys):
            self.select_into(key, out, seen, max_num, begin_ts, end_ts)
        return out

    def select_into(self, key: str, out: list[int], seen: set[int], max_num: int,
                    begin_ts: int, end_ts: int) -> None:
        """IndexFile.selectPhyOffset: append to ``out`` the matches for ``key`` that are not in
        ``seen`` (and add them to it), stopping once ``len(out) >= max_num``."""
        mm = self._map()
        count = self._index_count             # snapshot: entries below it are complete
        if count <= 1 or len(out) >= max_num:
            return
        key_hash = index_key_hash(key)
        cur = _load32(mm, HEADER_SIZE + (key_hash % self.hash_slot_num) * HASH_SLOT_SIZE)
        if cur <= INVALID_INDEX or cur > count:
            # cur == count is readable: the writer stores an entry before the slot naming it.
            return
        entries_at = self._entries_at
        file_begin = self._begin_timestamp
        unpack = _ENTRY.unpack_from
        while len(out) < max_num:
            hash_read, phy, time_diff, prev = unpack(mm, entries_at + cur * INDEX_SIZE)
            if time_diff < 0:
                break                         # never written by a valid put
            time_read = file_begin + time_diff * 1000
            if hash_read == key_hash and begin_ts <= time_read <= end_ts and phy not in seen:
                seen.add(phy)
                out.append(phy)
            # Chains only point back in time: stop at their end, at anything that does not
            # point strictly backwards (corruption), or once older than the range.
            if prev <= INVALID_INDEX or prev >= cur or time_read < begin_ts:
                break
            cur = prev

    def entries(self) -> list[tuple[int, int, int, int]]:
        """Every entry (keyHash, phyOffset, timeDiff, prevIndex) in put order: for dump tools
        and tests."""
        mm = self._map()
        at = self._entries_at
        return [_ENTRY.unpack_from(mm, at + n * INDEX_SIZE) for n in range(1, self._index_count)]

    # ---- durability and lifetime ---------------------------------------------------------------
    def flush(self) -> None:
        """msync(MS_SYNC) the whole mapping (the kernel writes only dirty pages). An OSError
        (EIO) propagates; the caller must not retry it as if it could succeed."""
        mm = self._map()
        if self.readonly:
            return
        self.dirty = False                    # before the msync: see the ``dirty`` comment
        faults.before_sync("msync", self.path)
        mm.flush()
        # the msync write-protected the pages it wrote: the next put into each faults again
        count = self._index_count
        self.slots_mapped, self.last_period, self.count_at_flush = False, count - self.count_at_flush, count

    def slot_pages(self) -> int:
        return (self._entries_at + mmap.PAGESIZE - 1) // mmap.PAGESIZE

    def prefault_slots(self) -> None:
        """Map the header and hash-slot pages writable now, in one madvise(MADV_POPULATE_WRITE)
        (Linux 5.14; elsewhere a no-op), instead of one write fault per page at the puts.
        A put lands in a random slot, so a busy file's puts fault on nearly every one of its
        ~4,900 slot pages (20 MB) after it is made and again after every msync, at ~5-8 µs a
        fault here (ext4_page_mkwrite): in a broker's first seconds at 10,000 msgs/s ~950 a
        second, ~40 ms of the index thread spread over its polls, where each burst queued the
        e2e row's producer or consumer behind it (RESULTS, "Session 13, localtail13"). Together
        they are ~20-30 ms of CPU. The call writes no data (safe beside readers in other
        processes); it marks every slot page dirty, so the next msync writes all of them: the
        caller (IndexService) asks only when puts came fast enough to dirty most of them anyway."""
        self.slots_mapped = True
        try:
            self._map().madvise(files.MADV_POPULATE_WRITE, 0, self.slot_pages() * mmap.PAGESIZE)
        except (OSError, ValueError):         # an older kernel (EINVAL): the puts fault as before
            pass

    def close(self) -> None:
        """Unmap. Idempotent. Does not flush: dirty pages still reach the disk through the
        page cache unless the machine goes down first."""
        mm, self._mm = self._mm, None
        if mm is not None:
            mm.close()

    def destroy(self) -> None:
        """Unmap and unlink. The file is never truncated: another process mapping it would
        die of SIGBUS; unlinked, its pages live until the last mapping goes."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __enter__(self) -> "IndexFile":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._mm is None else f"{self._index_count - 1} keys"
        return (f"IndexFile({self.path!r}, {state}, phy {self._begin_phy_offset}.."
                f"{self._end_phy_offset}, ts {self._begin_timestamp}..{self._end_timestamp})")
