"""The timer store's own files: one state byte per timer-queue entry, and a checkpoint.

Why this shape: a timer message is stored once, as a record in the CommitLog under
``rmq_sys_wheel_timer`` (queue 0: timers, queue 1: recall markers), whose ConsumeQueue entry
already holds everything the wheel needs (the record's position and, as its tag code, the
due time TIMER_OUT_MS). What the wheel adds is only *what became of each entry*, and that is
one byte per queue offset. Pending timers are then rebuilt at start by walking the queue
from the lowest unsettled offset and keeping the entries whose byte is 0: nothing about the
wheel has to be snapshotted, so nothing can be lost or duplicated by a snapshot taken at the
wrong moment (the failure RocketMQ 5's users still report).

Layout (``<store root>/shmqtimer/``, shmq-specific: not RocketMQ's ``timerwheel``/``timerlog``,
so an Apache broker opening the store never misreads it):

``marks/<qid>/<20-digit first offset>``: MARKS_PER_FILE bytes, preallocated (zero = pending).

======  ====  ================================================================
offset  size  byte at (queue offset - first offset of the file)
======  ====  ================================================================
0       1     0 PENDING: not settled (a timer still to fire, or a marker still
              in force)
              1 DELIVERED: re-put to its REAL_TOPIC (the delivery record says so)
              2 CANCELLED: recalled before it was due; never delivered
              3 ROLLED: re-appended to the timer topic before its CommitLog
              file could expire (the new entry carries the timer on)
              4 DROPPED: unusable (record gone or without REAL_TOPIC); logged
              5 SPENT: a recall marker whose target time has passed
======  ====  ================================================================

``checkpoint`` (CHECKPOINT_SIZE bytes, big-endian, replaced atomically):

======  ====  ================================================================
offset  size  field
======  ====  ================================================================
0       8     magic b"SHMQTMR1"
8       8     scan_from: CommitLog position; every record the timer service
              appended below it has its state byte on disk
16      8     low watermark of queue 0 (every offset below it is settled)
24      8     low watermark of queue 1
32      8     wall-clock ms the checkpoint was written (diagnostics)
40      4     CRC32 (zlib) of bytes 0..39
======  ====  ================================================================

Invariants. A state byte that stands for a record the service appended (DELIVERED,
ROLLED) is written only once that record is in the flushed part of the CommitLog, so a
power loss cannot keep the byte and lose the record. Every such record carries
``SHMQ_TIMER_SRC = "<qid>:<offset>"``; after a crash the CommitLog is scanned from
``scan_from`` and each record found settles its source: a timer is re-put exactly once in
the CommitLog, whenever the process died. A damaged or missing checkpoint scans from the
CommitLog's first position (slow, still exact).
"""
from __future__ import annotations

import mmap
import os
import struct
import zlib

from . import faults, files

DIR = "shmqtimer"
MARKS_PER_FILE = 1 << 20
PENDING, DELIVERED, CANCELLED, ROLLED, DROPPED, SPENT = range(6)
QUEUES = (0, 1)                      # timers, recall markers

_CK = struct.Struct(">8sqqqqI")
CHECKPOINT_SIZE = _CK.size
_MAGIC = b"SHMQTMR1"


class TimerCheckpoint:
    __slots__ = ("scan_from", "low")

    def __init__(self, scan_from: int = 0, low: tuple[int, int] = (0, 0)):
        self.scan_from = scan_from
        self.low = list(low)

    def encode(self, now_ms: int) -> bytes:
        head = _CK.pack(_MAGIC, self.scan_from, self.low[0], self.low[1], now_ms, 0)[:-4]
        return head + struct.pack(">I", zlib.crc32(head))

    @classmethod
    def decode(cls, raw: bytes) -> "TimerCheckpoint | None":
        """None when ``raw`` is not a checkpoint this code wrote (wrong size, magic or CRC)."""
        if len(raw) != CHECKPOINT_SIZE:
            return None
        magic, scan_from, low0, low1, _ms, crc = _CK.unpack(raw)
        if magic != _MAGIC or crc != zlib.crc32(raw[:-4]) or min(scan_from, low0, low1) < 0:
            return None
        return cls(scan_from, (low0, low1))


class TimerMarks:
    """The state bytes of both timer queues, mapped. Single writer: the timer service."""

    def __init__(self, root: str, mode: int = 0o600):
        self.dir = os.path.join(root, DIR)
        self.mode = mode
        self._maps: dict[tuple[int, int], mmap.mmap] = {}
        self._named: set[tuple[int, int]] = set()   # files whose name sync() made durable
        for q in QUEUES:
            files.ensure_dir(os.path.join(self.dir, "marks", str(q)))
            files.make_names_durable(os.path.join(self.dir, "marks", str(q)), root)

    def _path(self, qid: int, index: int) -> str:
        return os.path.join(self.dir, "marks", str(qid), files.name_of(index * MARKS_PER_FILE))

    def _map(self, qid: int, index: int, create: bool) -> mmap.mmap | None:
        mm = self._maps.get((qid, index))
        if mm is None:
            path = self._path(qid, index)
            if not os.path.exists(path):
                if not create:
                    return None
                files.create_preallocated(path, MARKS_PER_FILE, self.mode)
            mm = self._maps[(qid, index)] = files.map_file(path, MARKS_PER_FILE)
        return mm

    def get(self, qid: int, offset: int) -> int:
        index, i = divmod(offset, MARKS_PER_FILE)
        mm = self._map(qid, index, False)
        return PENDING if mm is None else mm[i]

    def set(self, qid: int, offset: int, state: int) -> None:
        index, i = divmod(offset, MARKS_PER_FILE)
        self._map(qid, index, True)[i] = state

    def first_pending(self, qid: int, lo: int, hi: int) -> int:
        """The lowest offset in [lo, hi) still PENDING (hi when none is)."""
        off = lo
        while off < hi:
            index, i = divmod(off, MARKS_PER_FILE)
            mm = self._map(qid, index, False)
            if mm is None:
                return off
            end = min(MARKS_PER_FILE, i + (hi - off))
            j = mm.find(b"\0", i, end)
            if j >= 0:
                return index * MARKS_PER_FILE + j
            off = index * MARKS_PER_FILE + end
        return hi

    def sync(self) -> None:
        for (qid, index), mm in self._maps.items():
            faults.synced(self._path(qid, index))
            mm.flush()
            if (qid, index) not in self._named:  # an msync keeps no name: the directory's fsync does
                files.fsync_dir(os.path.dirname(self._path(qid, index)))
                self._named.add((qid, index))

    def drop_below(self, qid: int, low: int) -> None:
        """Unlink the files wholly below ``low`` (all settled)."""
        for off in files.list_numbered(os.path.join(self.dir, "marks", str(qid))):
            index = off // MARKS_PER_FILE
            if (index + 1) * MARKS_PER_FILE <= low:
                mm = self._maps.pop((qid, index), None)
                if mm is not None:
                    mm.close()
                os.unlink(self._path(qid, index))

    # ---- checkpoint ------------------------------------------------------------------
    @property
    def checkpoint_path(self) -> str:
        return os.path.join(self.dir, "checkpoint")

    def load_checkpoint(self) -> TimerCheckpoint | None:
        try:
            with open(self.checkpoint_path, "rb") as f:
                return TimerCheckpoint.decode(f.read(CHECKPOINT_SIZE + 1))
        except FileNotFoundError:
            return None

    def write_checkpoint(self, ck: TimerCheckpoint, now_ms: int) -> None:
        """Sync the state bytes first: the checkpoint may only claim what is on disk."""
        self.sync()
        files.write_atomic(self.checkpoint_path, ck.encode(now_ms), self.mode)

    def close(self) -> None:
        for mm in self._maps.values():
            try:
                mm.close()
            except BufferError:
                pass
        self._maps.clear()
