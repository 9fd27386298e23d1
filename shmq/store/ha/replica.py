"""The slave's side of the store: CommitLog bytes received from the master are written at
their offset, then the complete records among them get their ConsumeQueue entries through
recovery's own ``dispatch_record`` and are published (commit position + the "new data"
futex), so readers, long polls, local consumers and the index dispatcher see them exactly
as they see appends on a master.

Two positions, as in RocketMQ's slave:
* ``received``: the end of the bytes written (what the slave reports to the master, its
  ``getMaxPhyOffset``). A frame may end inside a record.
* ``commit``: the end of the last complete, verified record (the control block's commit
  position; readers never look past it). ``commit <= received`` always.

After a crash the store's recovery cuts the log back to its last verified record and the
slave resumes from there (the master streams from the offset the slave reports).
"""
from __future__ import annotations

import logging
import struct
import threading

from shmq.message.layout import BLANK_MAGIC, MESSAGE_MAGIC
from shmq.native import lib

from ..recovery import dispatch_record
from .wire import HAProtocolError

log = logging.getLogger("shmq.store.ha")

_TOTAL_MAGIC = struct.Struct(">iI")


class ReplicaWriter:
    def __init__(self, store):
        self.store = store
        self.commitlog = store.commitlog
        self.fsize = store.commitlog.file_size
        self.tag_code = store.tag_code
        self.commit = store.commit_pos
        self.received = self.commit
        self._lock = threading.Lock()
        self._slots: dict[tuple[str, int], int] = {}

    # ------------------------------------------------------------------ writing ----
    def append(self, offset: int, data: bytes) -> int:
        """Write ``data`` at ``offset`` (which must be where the slave stands, or anywhere on a
        file boundary while the slave holds nothing at all) and publish every record it
        completes. Returns the new received position."""
        with self._lock:
            if offset != self.received:
                if self.received == 0 and self.commit == 0 and offset % self.fsize == 0:
                    self._start_at(offset)
                else:
                    raise HAProtocolError(f"master sent data for offset {offset} but this slave's log ends at "
                                          f"{self.received}")
            pos, view = offset, memoryview(data)
            while view:
                idx, off = divmod(pos, self.fsize)
                n = min(len(view), self.fsize - off)
                mm = self.commitlog.map(idx, create=True)
                mm[off:off + n] = view[:n]
                view = view[n:]
                pos += n
            self.received = pos
            self._dispatch()
            return self.received

    def _start_at(self, offset: int) -> None:
        """An empty slave is sent the master's last file from its start (RocketMQ's
        HAConnection does that for a slave that reports 0): the log begins there."""
        idx = offset // self.fsize
        for i in self.commitlog.file_indexes():
            if i != idx:
                self.commitlog.delete(i)
        self.commitlog.create(idx)
        ctl = self.store.cb.ctl
        ctl.pos.min_pos = offset
        self.commit = self.received = offset
        lib.shmq_publish_recovered(ctl, offset)  # commit and flushed: nothing lies below
        lib.shmq_publish_replica(ctl, offset)
        log.info("empty slave: the log starts at the master's offset %d", offset)

    # ------------------------------------------------------------------ dispatching ----
    def _dispatch(self) -> None:
        """Give every complete record in [commit, received) its ConsumeQueue entry, set the
        queues' next offsets, then publish the new commit position (in that order: a reader
        that sees the position finds the entries)."""
        pos, end = self.commit, self.received
        advanced: dict[tuple[str, int], int] = {}   # queue -> next offset
        first: dict[tuple[str, int], int] = {}      # queue -> first offset seen in this run
        while end - pos >= 8:
            idx, off = divmod(pos, self.fsize)
            mm = self.commitlog.map(idx)
            total, magic = _TOTAL_MAGIC.unpack_from(mm, off)
            if magic == BLANK_MAGIC:
                nxt = (idx + 1) * self.fsize
                if total != self.fsize - off:
                    raise HAProtocolError(f"bad BLANK filler at {pos} (size {total})")
                if end < nxt:  # the rest of this file has not arrived: stay before the filler
                    break
                pos = nxt
                continue
            if magic != MESSAGE_MAGIC or total <= 0 or off + total > self.fsize:
                raise HAProtocolError(f"no record at {pos} in the replicated bytes (magic {magic:#x}, size {total})")
            if pos + total > end:
                break
            rc = self.commitlog.check(pos)
            if rc != total:
                raise HAProtocolError(f"replicated record at {pos} fails its check ({rc})")
            done = dispatch_record(self.store.queues, mm, off, pos, rc, self.tag_code)
            if done is not None:
                key, qoff, _ = done
                if advanced.get(key, -1) < qoff + 1:
                    advanced[key] = qoff + 1
                first.setdefault(key, qoff)
            pos += total
        if pos == self.commit:
            return
        self._advance_queues(advanced, first)
        self.commit = pos
        lib.shmq_publish_replica(self.store.cb.ctl, pos)

    def _advance_queues(self, advanced: dict, first: dict) -> None:
        ctl = self.store.cb.ctl
        a = self.store.appender
        for key, nxt in advanced.items():
            slot = self._slots.get(key)
            if slot is None:
                with a.lock:
                    slot = self._slots[key] = a.slot(*key)
            s = ctl.queues[slot]
            if s.next_offset == 0 and s.min_offset == 0:
                # a queue this slave first sees mid-way (it started at the master's last
                # file): its entries begin at the first record received
                s.min_offset = first[key]
            if nxt > s.next_offset:
                s.next_offset = nxt


__all__ = ["ReplicaWriter"]
