"""POP state, one per broker (the supervisor's), durable across kill -9: where each group's
POP has got to in each queue, and the checkpoints (CKs) of messages handed out but not yet
acked. Every change is a line appended to a journal *before* the request is answered, so a
kill -9 at any point leaves: an acked message acked (it never comes back), a handed-out
message in a CK (it comes back after its invisible time), and a message not yet handed out
still ahead of the POP offset.

Journal ``<store root>/shmqpop/journal``: one line per change, ``<crc32 hex8> <json>\\n``
(CRC32 of the JSON text; a line that fails it, and everything after, is a torn tail and is
dropped at replay). JSON objects, ``k`` the kind:

=====  ==================================================================================
kind   fields
=====  ==================================================================================
P      g group, t stored topic, q queue id, s ck start offset, pt pop time ms, it invisible
       ms, o handed-out offsets, n next POP offset of (g, t, q), od orderly (0/1),
       rc reconsume counts by offset (orderly)
A      g, t, q, s, pt, o: acked offsets of that CK
C      ck closed (g, t, q, s, pt): revived, or fully acked
N      g, t, q, n: the POP offset set (an orderly CK expired: back to its first unacked)
=====  ==================================================================================

When the journal outgrows COMPACT_BYTES it is rewritten (temp file, fsync, rename) as the
N and P/A lines of what is still open. ``sync()`` fdatasyncs it (every second, by the POP
service), so a power loss loses at most that second, as ASYNC_FLUSH does for messages.
"""
from __future__ import annotations

import json
import logging
import os
import zlib
from dataclasses import dataclass, field

from shmq.store import faults, files

log = logging.getLogger("shmq.broker.pop")
DIR = "shmqpop"
COMPACT_BYTES = 16 * 1024 * 1024


@dataclass
class Checkpoint:
    group: str
    topic: str          # where the messages are stored (the topic or its POP retry topic)
    qid: int
    start: int
    pop_time: int
    invisible: int
    offsets: list[int]
    order: bool = False
    acked: set[int] = field(default_factory=set)
    counts: dict[int, int] = field(default_factory=dict)   # orderly: times popped before

    @property
    def key(self) -> tuple:
        return (self.group, self.topic, self.qid, self.start, self.pop_time)

    @property
    def due(self) -> int:
        return self.pop_time + self.invisible

    def unacked(self) -> list[int]:
        return [o for o in self.offsets if o not in self.acked]


class PopState:
    def __init__(self, root: str, mode: int = 0o600):
        self.dir = os.path.join(root, DIR)
        self.path = os.path.join(self.dir, "journal")
        self.mode = mode
        self.offsets: dict[tuple[str, str, int], int] = {}
        self.cks: dict[tuple, Checkpoint] = {}
        files.ensure_dir(self.dir)
        self._replay()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, mode)
        self._size = os.fstat(self._fd).st_size
        files.make_names_durable(self.path, root)  # fdatasync of the journal keeps no name

    # ---- journal ---------------------------------------------------------------------
    @staticmethod
    def _line(rec: dict) -> bytes:
        text = json.dumps(rec, separators=(",", ":"))
        return f"{zlib.crc32(text.encode()):08x} {text}\n".encode()

    def _write(self, *recs: dict) -> None:
        data = b"".join(self._line(r) for r in recs)
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view):]
        self._size += len(data)
        if self._size > COMPACT_BYTES:
            self.compact()

    def _replay(self) -> None:
        try:
            with open(self.path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return
        good = 0
        for line in raw.split(b"\n"):
            if not line:
                break
            crc, _, text = line.partition(b" ")
            try:
                if int(crc, 16) != zlib.crc32(text):
                    break
                self._apply(json.loads(text))
            except (ValueError, KeyError, TypeError):
                break
            good += len(line) + 1
        if good < len(raw):
            log.warning("POP journal: dropped a torn tail of %d bytes", len(raw) - good)
            with open(self.path, "r+b") as f:
                f.truncate(good)

    def _apply(self, r: dict) -> None:
        k, key = r["k"], (r["g"], r["t"], int(r["q"]))
        if k == "P":
            ck = Checkpoint(r["g"], r["t"], int(r["q"]), int(r["s"]), int(r["pt"]), int(r["it"]),
                            [int(o) for o in r["o"]], bool(r.get("od")),
                            counts={int(a): int(b) for a, b in (r.get("rc") or {}).items()})
            self.cks[ck.key] = ck
            self.offsets[key] = max(self.offsets.get(key, 0), int(r["n"]))
        elif k == "A":
            ck = self.cks.get((*key, int(r["s"]), int(r["pt"])))
            if ck is not None:
                ck.acked.update(int(o) for o in r["o"])
        elif k == "C":
            self.cks.pop((*key, int(r["s"]), int(r["pt"])), None)
        elif k == "N":
            self.offsets[key] = int(r["n"])

    def compact(self) -> None:
        recs = [{"k": "N", "g": g, "t": t, "q": q, "n": n} for (g, t, q), n in self.offsets.items()]
        for ck in self.cks.values():
            recs.append(self._pop_rec(ck, self.offsets.get((ck.group, ck.topic, ck.qid), 0)))
            if ck.acked:
                recs.append(self._ack_rec(ck, sorted(ck.acked)))
        files.write_atomic(self.path, b"".join(self._line(r) for r in recs), self.mode)
        os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        self._size = os.fstat(self._fd).st_size

    def sync(self) -> None:
        faults.synced(self.path)
        os.fdatasync(self._fd)

    def close(self) -> None:
        try:
            self.sync()
        finally:
            os.close(self._fd)

    # ---- changes ---------------------------------------------------------------------
    @staticmethod
    def _pop_rec(ck: Checkpoint, nxt: int) -> dict:
        r = {"k": "P", "g": ck.group, "t": ck.topic, "q": ck.qid, "s": ck.start, "pt": ck.pop_time,
             "it": ck.invisible, "o": ck.offsets, "n": nxt, "od": int(ck.order)}
        if ck.counts:
            r["rc"] = {str(a): b for a, b in ck.counts.items()}
        return r

    @staticmethod
    def _ack_rec(ck: Checkpoint, offsets) -> dict:
        return {"k": "A", "g": ck.group, "t": ck.topic, "q": ck.qid, "s": ck.start, "pt": ck.pop_time,
                "o": list(offsets)}

    @staticmethod
    def _close_rec(ck: Checkpoint) -> dict:
        return {"k": "C", "g": ck.group, "t": ck.topic, "q": ck.qid, "s": ck.start, "pt": ck.pop_time}

    def add(self, ck: Checkpoint, next_offset: int) -> None:
        """A POP handed out ``ck.offsets``; the group's POP offset in that queue moves on."""
        while ck.key in self.cks:  # two POPs of one queue in one millisecond: keep keys apart
            ck.pop_time += 1
        self._write(self._pop_rec(ck, next_offset))
        self.cks[ck.key] = ck
        self.offsets[(ck.group, ck.topic, ck.qid)] = next_offset

    def ack(self, key: tuple, offsets) -> Checkpoint | None:
        """Ack offsets of a CK; None when the CK is gone (revived or acked already)."""
        ck = self.cks.get(key)
        if ck is None:
            return None
        new = [o for o in offsets if o in ck.offsets and o not in ck.acked]
        if not new:
            return ck
        recs = [self._ack_rec(ck, new)]
        done = len(ck.acked) + len(new) == len(ck.offsets)
        if done:
            recs.append(self._close_rec(ck))
        self._write(*recs)
        ck.acked.update(new)
        if done:
            del self.cks[key]
        return ck

    def close_ck(self, ck: Checkpoint, rewind_to: int | None = None) -> None:
        recs = [self._close_rec(ck)]
        if rewind_to is not None:
            recs.append({"k": "N", "g": ck.group, "t": ck.topic, "q": ck.qid, "n": rewind_to})
        self._write(*recs)
        self.cks.pop(ck.key, None)
        if rewind_to is not None:
            self.offsets[(ck.group, ck.topic, ck.qid)] = rewind_to

    def expired(self, now_ms: int) -> list[Checkpoint]:
        return [ck for ck in self.cks.values() if ck.due <= now_ms]

    def busy(self, group: str, topic: str, qid: int) -> bool:
        """An orderly queue with a CK still open: not to be popped by anyone else."""
        return any(ck.group == group and ck.topic == topic and ck.qid == qid for ck in self.cks.values())

    def low_offset(self, group: str, topic: str, qid: int) -> int | None:
        """The first offset not yet acked (what the group's consumer offset shows)."""
        nxt = self.offsets.get((group, topic, qid))
        if nxt is None:
            return None
        open_ = [min(ck.unacked()) for ck in self.cks.values()
                 if ck.group == group and ck.topic == topic and ck.qid == qid and ck.unacked()]
        return min([nxt, *open_])
