"""Recovery: make the files agree with each other before the store opens, then rebuild the
shared tables from them. One procedure for a clean and for a crashed start (RocketMQ has
two near-copies; the clean case is just a scan that finds nothing past the checkpoint).

1. Queues: every ConsumeQueue on disk gives a (topic, queue id) and its entry count.
2. CommitLog tail: from min(checkpoint.cq_flushed, checkpoint.log_flushed) every record is
   verified in order (magic, TOTALSIZE against the lengths inside, PHYSICALOFFSET equal to
   its position, body CRC); a BLANK filler sends the scan to the next file. The first
   record that fails is the end of the log. Each good record's ConsumeQueue entry is
   rewritten if it is missing or different (idempotent: the record carries its queue
   offset), so a CQ that lagged the log (power loss) is caught up.
3. Cut back: the rest of the last file is zeroed as far as it holds anything, later files
   are deleted, and every ConsumeQueue keeps only the entries that point at their own record
   before the end (the record there has the entry's size, topic, queue and queue offset): a
   power cut can tear a 20-byte entry across two pages, one written back and one not, into
   an entry that points inside the log at another record.
4. Tables: queue next/min offsets go into the control block; commit and flushed positions
   are published (the recovered range is fsynced first).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field

from shmq.errors import StoreCorrupt
from shmq.message.layout import I32, has_cq_entry
from shmq.message.record import unpack_record
from shmq.native import lib

from . import files
from .checkpoint import Checkpoint
from .commitlog import CommitLog
from .consume_queue import ENTRY, ENTRY_SIZE

log = logging.getLogger("shmq.store.recovery")

_ZERO_PROBE = 1 << 16


@dataclass
class RecoveryReport:
    start: int = 0                 # where the scan began
    end: int = 0                   # the end of the log (commit position)
    records_scanned: int = 0
    cq_entries_written: int = 0    # entries that were missing or wrong
    cq_entries_cut: int = 0        # entries past the end, removed
    bytes_zeroed: int = 0
    files_deleted: list[int] = field(default_factory=list)
    stopped_because: str = ""


def dispatch_record(queues, mm, off: int, pos: int, size: int, tag_code):
    """Give the verified record at ``pos`` (``off`` in its mapped file ``mm``) its
    ConsumeQueue entry unless it has it already. Recovery and a slave's replica writer
    (store/ha) both build queues from CommitLog bytes through this one function. Returns
    ((topic, queue id), queue offset, entries written) or None for a record with no entry
    (prepared / rolled-back transaction)."""
    (_, _, qid, _, qoff, _, sysflag, _, _, store_ts, _, _, _, _, topic,
     props) = unpack_record(memoryview(mm), off)
    if not has_cq_entry(sysflag):
        return None
    cq = queues.get(topic, qid)
    have = cq.entry(qoff)
    written = 0
    if have is None or have[0] != pos or have[1] != size:
        cq.write_entry(qoff, pos, size, tag_code(topic, props, store_ts))
        written = 1
    return (topic, qid), qoff, written


def default_tag_code(topic: str, props: bytes, store_ts: int) -> int:
    return lib.shmq_tag_code_of_props(props, len(props))


def recover(commitlog: CommitLog, queues, checkpoint: Checkpoint, tag_code=default_tag_code, *,
            crashed: bool = False) -> tuple[RecoveryReport, dict]:
    """Returns the report and {(topic, qid): (next_offset, min_offset)} for the tables.
    ``crashed`` (the abort file was there) also clears entries a power cut left past a hole
    in a ConsumeQueue (see ``_cut_queue``)."""
    fsize = commitlog.file_size
    report = RecoveryReport()
    indexes = commitlog.file_indexes()
    if not indexes:
        commitlog.create(0)
        indexes = [0]
    present = set(indexes)
    min_phys = indexes[0] * fsize
    start = max(min_phys, min(checkpoint.cq_flushed, checkpoint.log_flushed))
    if start // fsize not in present:
        start = min_phys
    report.start = start

    # 1. queues known from their files
    next_of: dict[tuple[str, int], int] = {}
    for topic, qid in queues.on_disk():
        next_of[(topic, qid)] = queues.get(topic, qid).last_offset()

    # 2. verify and re-dispatch the tail
    pos = start
    while True:
        idx, off = divmod(pos, fsize)
        if idx not in present:
            report.stopped_because = "end of the last file"
            break
        mm = commitlog.map(idx)
        rc = commitlog.check(pos)
        if rc == 0:
            (total,) = I32.unpack_from(mm, off)  # a BLANK filler: TOTALSIZE = the rest of the file
            if total != fsize - off:
                report.stopped_because = f"bad BLANK filler at {pos}"
                break
            pos = (idx + 1) * fsize
            continue
        if rc < 0:
            report.stopped_because = f"no valid record at {pos} (check {rc})"
            break
        report.records_scanned += 1
        done = dispatch_record(queues, mm, off, pos, rc, tag_code)
        if done is not None:
            key, qoff, written = done
            report.cq_entries_written += written
            if next_of.get(key, 0) < qoff + 1:
                next_of[key] = qoff + 1
        pos += rc
    end = report.end = pos

    # 3. cut back everything past the end
    _cut_log(commitlog, indexes, present, end, report)
    tables = {}
    own = _OwnRecord(commitlog, present, end)
    for (topic, qid), n in list(next_of.items()):
        cq = queues.get(topic, qid)
        n = _cut_queue(cq, n, report, crashed, lambda i, e, k=(topic, qid): own(k, i, e))
        tables[(topic, qid)] = (n, _first_live(cq, n, min_phys))
    return report, tables


class _OwnRecord:
    """Whether entry ``i`` = (phys, size, tag) of a queue points at that queue's record number
    ``i``, whole before the end of the log. Only the header and the topic are read (a record
    before the end is known good: verified by the scan or made durable before the checkpoint
    that let the scan skip it). An entry into a file deleted by age cannot be checked and is
    taken as it is: it lies before every entry recovery could have torn."""

    def __init__(self, commitlog: CommitLog, present, end: int):
        self.log, self.present, self.end = commitlog, present, end
        self.first = min(present) * commitlog.file_size if present else 0

    def __call__(self, key: tuple[str, int], i: int, e: tuple[int, int, int]) -> bool:
        phys, size = e[0], e[1]
        if size <= 0 or phys + size > self.end:
            return False
        if phys < self.first:
            return True
        if phys // self.log.file_size not in self.present:
            return False
        rec = self.log.record_at(phys)
        if rec is None or len(rec) != size:
            return False
        try:
            (_, _, qid, _, qoff, at, _, _, _, _, _, _, _, _, topic, _) = unpack_record(rec)
        except StoreCorrupt:
            return False
        return at == phys and qid == key[1] and qoff == i and topic == key[0]


def _cut_log(commitlog: CommitLog, indexes, present, end: int, report: RecoveryReport) -> None:
    """Zero what the last file holds past ``end`` and delete every later file."""
    idx, off = divmod(end, commitlog.file_size)
    if idx in present:
        report.bytes_zeroed = _zero_dirty_tail(commitlog.map(idx), off)
    for i in indexes:
        if i > idx:
            commitlog.delete(i)
            report.files_deleted.append(i)
    if report.files_deleted:
        # a deleted file that came back after another power cut would be reused by the
        # next roll with its old records still in it
        files.fsync_dir(commitlog.dir)


def _zero_dirty_tail(mm, off: int) -> int:
    """Zero from ``off`` while anything non-zero remains. Appends are contiguous, so once a
    stretch longer than the largest record is all zero, the rest is too."""
    size = len(mm)
    zeroed = 0
    clean_run = 0
    limit = (4 << 20) + (1 << 16)
    p = off
    while p < size and clean_run < limit:
        n = min(_ZERO_PROBE, size - p)
        chunk = mm[p:p + n]
        if chunk.count(0) == n:
            clean_run += n
        else:
            mm[p:p + n] = bytes(n)
            zeroed += n
            clean_run = 0
        p += n
    return zeroed


def _cut_queue(cq, n: int, report: RecoveryReport, crashed: bool, own) -> int:
    """The entries that point at their own record (``own(i, entry)``) are a prefix: every
    entry of a record before the scan's start was made durable before the checkpoint, every
    one of a record the scan met was rewritten, and each later one is for a record past the
    end (or torn by the cut). Find the prefix by bisection, zero the rest and return the new
    entry count. After a crash the rest of the queue's last file is checked too: a power cut
    keeps or drops each page of entries, so entries for records past the end may sit beyond
    a page of zeros, where the entry count (the first empty entry) does not reach; left
    there, a later start would count them again and serve whatever the log holds at their
    offsets by then."""
    lo, hi = cq.first_file_offset(), n
    while lo < hi:
        mid = (lo + hi) // 2
        e = cq.entry(mid)
        if e is not None and own(mid, e):
            lo = mid + 1
        else:
            hi = mid
    if lo < n or (crashed and cq.has_entries_from(lo)):
        report.cq_entries_cut += n - lo
        cq.clear_from(lo)
    return lo


def _first_live(cq, n: int, min_phys: int) -> int:
    """The first entry that still points into an existing CommitLog file."""
    return cq.first_at_or_after(min_phys, cq.first_file_offset(), n)


__all__ = ["recover", "dispatch_record", "RecoveryReport", "ENTRY", "ENTRY_SIZE"]
