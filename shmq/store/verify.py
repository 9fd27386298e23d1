"""A full consistency check of a store's files, for tests and for ``shmq store verify``:
every record from the first file to the end verifies (magic, lengths, PHYSICALOFFSET, CRC);
every ConsumeQueue has dense entries from its min offset, each pointing at a record of the
same topic, queue id and queue offset; every record with a queue entry is pointed at once.
Works on a closed store or beside a live one (it reads up to the given end)."""
from __future__ import annotations

from dataclasses import dataclass, field

from shmq.message.layout import has_cq_entry
from shmq.message.record import unpack_record

from .appender import QueueRegistry
from .commitlog import CommitLog
from .config import StoreConfig


@dataclass
class VerifyReport:
    end: int = 0
    records: int = 0
    per_queue: dict = field(default_factory=dict)  # (topic, qid) -> number of records
    problems: list = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def verify_store(cfg: StoreConfig, end: int | None = None, *, check_queues: bool = True) -> VerifyReport:
    cl = CommitLog(cfg)
    queues = QueueRegistry(cfg)
    rep = VerifyReport()
    try:
        fsize = cl.file_size
        idxs = cl.file_indexes()
        if not idxs:
            return rep
        present = set(idxs)
        pos = idxs[0] * fsize
        seen: dict[tuple[str, int], dict[int, int]] = {}
        while end is None or pos < end:
            i, off = divmod(pos, fsize)
            if i not in present:
                break
            mm = cl.map(i)
            rc = cl.check(pos)
            if rc == 0:
                pos = (i + 1) * fsize
                continue
            if rc < 0:
                if end is not None:
                    rep.problems.append(f"bad record at {pos} (check {rc}) before the end {end}")
                break
            (_, _, qid, _, qoff, _, sysflag, _, _, _, _, _, _, _, topic, _) = unpack_record(memoryview(mm), off)
            rep.records += 1
            if has_cq_entry(sysflag):
                q = seen.setdefault((topic, qid), {})
                if qoff in q:
                    rep.problems.append(f"{topic}:{qid} offset {qoff} stored twice (at {q[qoff]} and {pos})")
                q[qoff] = pos
            pos += rc
        rep.end = pos
        for key, q in seen.items():
            rep.per_queue[key] = len(q)
            if not check_queues:
                continue
            cq = queues.get(*key)
            lo = min(q)
            hi = max(q) + 1
            if hi - lo != len(q):
                rep.problems.append(f"{key[0]}:{key[1]} has holes: {len(q)} records over offsets {lo}..{hi - 1}")
            for qoff in range(lo, hi):
                e = cq.entry(qoff)
                if e is None:
                    rep.problems.append(f"{key[0]}:{key[1]} offset {qoff}: no ConsumeQueue entry")
                elif q.get(qoff) != e[0]:
                    rep.problems.append(f"{key[0]}:{key[1]} offset {qoff}: entry points at {e[0]}, "
                                        f"record is at {q.get(qoff)}")
            if cq.entry(hi) is not None:
                rep.problems.append(f"{key[0]}:{key[1]} has an entry at {hi} past its last record")
            if len(rep.problems) > 50:
                break
        return rep
    finally:
        queues.close()
        cl.close()


__all__ = ["verify_store", "VerifyReport"]
