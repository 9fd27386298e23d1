"""The timer wheel over the store (owner only, one thread): ingest timer records, fire them
when due, roll the ones whose CommitLog file is about to expire, recover after a crash.

Formats and invariants are in timer_marks. The life of a timer message:

1. The put pipeline stores it in ``rmq_sys_wheel_timer`` queue 0 (timer_rules), durably like
   any message. ``ingest`` sees the new ConsumeQueue entry and puts (due, offset) in the
   TimerIndex; nothing else is written.
2. When due, ``fire_due`` reads the record, drops REAL_TOPIC / REAL_QID, adds
   TIMER_ENQUEUE_MS, TIMER_DEQUEUE_MS and SHMQ_TIMER_SRC, and re-puts it to the real topic
   through the pipeline's ``put_inner`` (TIMER_OUT_MS stays, so it is not timed again). The
   entry's state byte becomes DELIVERED once the re-put is flushed (``settle``).
3. A recall marker (queue 1, TIMER_DEL_UNIQKEY = "topic+uniq key") is read at ingest; a timer
   whose key is recalled is marked CANCELLED instead of re-put. The marker is SPENT once no
   pending timer can be due before it.
4. Before the cleanup deletes a CommitLog file, ``roll_below`` re-appends every pending timer
   stored in it to the timer topic (TIMER_ROLL_TIMES + 1, same due time, same UNIQ_KEY): a
   delay longer than the retention survives any number of expiries.

After a kill -9: ``open`` reads the checkpoint, scans the CommitLog from ``scan_from`` for
records carrying SHMQ_TIMER_SRC and settles their sources, then walks both queues from the
low watermarks and keeps what is still pending. A timer is therefore re-put exactly once in
the CommitLog, and never before its due time (the only clock is the wall clock at firing).
"""
from __future__ import annotations

import collections
import logging

from shmq.errors import InvalidMessage
from shmq.message.properties import encode_properties
from shmq.message.record import decode_record
from shmq.native import lib

from . import timer_marks as tm
from . import timer_rules as tr
from .timer_index import TimerIndex

log = logging.getLogger("shmq.store.timer")
_SRC_NEEDLE = (tr.P_TIMER_SRC + "\x01").encode()
RETRY_SOON = "retry"


class TimerStore:
    """``put_inner``: the pipeline's store stage (PutPipeline.put_inner)."""

    def __init__(self, store, put_inner, *, now=lib.shmq_now_ms):
        self.store = store
        self._put_inner = put_inner
        self.now = now
        self.marks = tm.TimerMarks(store.cfg.root, store.cfg.file_mode)
        self.index = TimerIndex()
        self.cancelled: dict[str, tuple[int, int]] = {}   # delete key -> (marker due, marker offset)
        self.next_off = [0, 0]                  # per queue: the next entry to ingest
        self.low = [0, 0]
        self._unsettled: collections.deque = collections.deque()  # (qid, off, state, start, end)
        self.delivered = self.cancelled_count = self.rolled = self.dropped = 0

    # ---- start -------------------------------------------------------------------------
    def open(self) -> None:
        ck = self.marks.load_checkpoint()
        if ck is None:
            ck = tm.TimerCheckpoint(self.store.cb.ctl.pos.min_pos, (0, 0))
        self.low = list(ck.low)
        self._scan_tail(max(ck.scan_from, self.store.cb.ctl.pos.min_pos))
        for q in tm.QUEUES:
            mn, _mx = self.store.queue_bounds(tr.TIMER_TOPIC, q) or (0, 0)
            self.low[q] = max(self.low[q], mn)
            self.next_off[q] = self.low[q]
        self.ingest(recovering=True)
        log.info("timer store open: %d pending timers, %d recalls in force", len(self.index), len(self.cancelled))

    def _scan_tail(self, pos: int) -> None:
        """Settle the sources of the records the service appended after ``pos``."""
        cl, end, n = self.store.commitlog, self.store.commit_pos, 0
        while pos < end:
            rec = cl.record_at(pos)
            if rec is None:  # BLANK filler or the end of a file: the next file
                pos = (pos // cl.file_size + 1) * cl.file_size
                continue
            index, off = divmod(pos, cl.file_size)
            if cl.map(index).find(_SRC_NEEDLE, off, off + len(rec)) >= 0:
                if self._settle_from_record(decode_record(rec)):
                    n += 1
            pos += len(rec)
        if n:
            log.warning("timer recovery: %d deliveries or rolls found after the checkpoint", n)

    def _settle_from_record(self, msg) -> bool:
        try:
            q, off = (int(x) for x in msg.properties[tr.P_TIMER_SRC].split(":"))
        except (KeyError, ValueError):
            return False
        if q != tr.TIMER_QID or off < 0 or self.marks.get(q, off) != tm.PENDING:
            return False
        # a record claims this source only if it is that timer (same due time, same UNIQ_KEY):
        # a client cannot settle someone else's timer by sending a forged SHMQ_TIMER_SRC
        src = self._record(q, off)
        if src is None or src is RETRY_SOON:
            return False
        e, orig = src
        if msg.properties.get(tr.P_TIMER_OUT_MS) != str(e[2]) or \
                msg.properties.get("UNIQ_KEY") != orig.properties.get("UNIQ_KEY"):
            log.warning("timer recovery: a record claims timer %d:%d but is not it; ignored", q, off)
            return False
        self.marks.set(q, off, tm.ROLLED if msg.topic == tr.TIMER_TOPIC else tm.DELIVERED)
        return True

    # ---- ingest --------------------------------------------------------------------------
    def ingest(self, *, recovering: bool = False) -> int:
        """Take in the timer-topic entries written since the last call. Returns how many."""
        n = self._ingest_markers()
        store, q = self.store, tr.TIMER_QID
        b = store.queue_bounds(tr.TIMER_TOPIC, q)
        if b is None:
            return n
        off, mx = max(self.next_off[q], b[0]), b[1]
        cq = store.queues.get(tr.TIMER_TOPIC, q)
        while off < mx:
            if recovering:
                off = self.marks.first_pending(q, off, mx)
                if off >= mx:
                    break
            e = cq.entry(off)
            if e is None:
                break
            self.index.add(e[2], off)
            off += 1
            n += 1
        self.next_off[q] = off
        return n

    def _ingest_markers(self) -> int:
        store, q, n = self.store, tr.MARKER_QID, 0
        b = store.queue_bounds(tr.TIMER_TOPIC, q)
        if b is None:
            return 0
        off = max(self.next_off[q], b[0])
        cq = store.queues.get(tr.TIMER_TOPIC, q)
        while off < b[1]:
            if self.marks.get(q, off) == tm.PENDING:
                e = cq.entry(off)
                rec = store.read_at(e[0]) if e else None
                if rec is None:
                    if e is not None and e[0] >= store.cb.ctl.pos.min_pos:
                        break  # published entry, record not committed yet: next pass
                    self.marks.set(q, off, tm.DROPPED)
                else:
                    key = decode_record(rec).properties.get(tr.P_TIMER_DEL_UNIQKEY)
                    if key:
                        self.cancelled[key] = (e[2], off)
                        n += 1
            off += 1
        self.next_off[q] = off
        return n

    # ---- firing --------------------------------------------------------------------------
    def fire_due(self, limit: int = 2048) -> int:
        """Re-put what is due now. Returns how many entries were settled or re-put."""
        now = self.now()
        due = self.index.pop_due(now, limit)
        done = 0
        for i, (ms, off) in enumerate(due):
            r = self._fire(ms, off, now)
            if r is RETRY_SOON:
                for p in due[i:]:
                    self.index.add(*p)
                break
            done += 1
        self._spend_markers()
        return done

    def _record(self, q: int, off: int):
        """(entry, decoded record) or RETRY_SOON / None (gone: marked DROPPED)."""
        store = self.store
        e = store.queues.get(tr.TIMER_TOPIC, q).entry(off)
        rec = store.read_at(e[0]) if e is not None else None
        if rec is None:
            if e is not None and e[0] >= store.cb.ctl.pos.min_pos:
                return RETRY_SOON
            log.error("timer %d:%d: its record is gone; dropped", q, off)
            self._mark_now(q, off, tm.DROPPED)
            return None
        return e, decode_record(rec)

    def _fire(self, ms: int, off: int, now: int):
        got = self._record(tr.TIMER_QID, off)
        if got is None or got is RETRY_SOON:
            return got
        _e, msg = got
        props = dict(msg.properties)
        topic = props.pop(tr.P_REAL_TOPIC, None)
        try:
            qid = int(props.pop(tr.P_REAL_QID, ""))
        except ValueError:
            qid = -1
        if not topic or qid < 0:
            log.error("timer 0:%d has no usable REAL_TOPIC/REAL_QID; dropped", off)
            return self._mark_now(tr.TIMER_QID, off, tm.DROPPED)
        if tr.delete_key(topic, props.get("UNIQ_KEY", "")) in self.cancelled:
            self.cancelled_count += 1
            return self._mark_now(tr.TIMER_QID, off, tm.CANCELLED)
        props.setdefault(tr.P_TIMER_ENQUEUE_MS, str(msg.store_timestamp))
        props[tr.P_TIMER_DEQUEUE_MS] = str(now)
        props[tr.P_TIMER_SRC] = f"{tr.TIMER_QID}:{off}"
        try:
            # the text of a stored record's properties: encoded without the client checks
            res = self._put_inner(topic, qid, bytes(msg.body), encode_properties(props), flag=msg.flag,
                                  sysflag=msg.sysflag,
                                  born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                                  reconsume_times=msg.reconsume_times, wait_flush=False)
        except InvalidMessage as e:
            log.error("timer 0:%d: %s/%d refuses it (%s); dropped", off, topic, qid, e)
            return self._mark_now(tr.TIMER_QID, off, tm.DROPPED)
        except Exception as e:  # noqa: BLE001 - the store is busy or full: try again soon
            log.warning("timer 0:%d: re-put to %s failed (%s); retrying", off, topic, e)
            return RETRY_SOON
        self.delivered += 1
        self._unsettled.append((tr.TIMER_QID, off, tm.DELIVERED, res.phys_offset, res.end))
        return True

    def _mark_now(self, q: int, off: int, state: int) -> bool:
        """A settlement that appended nothing: its byte can be written at once."""
        self.marks.set(q, off, state)
        if state == tm.DROPPED:
            self.dropped += 1
        return True

    def _spend_markers(self) -> None:
        if not self.cancelled:
            return
        nxt = self.index.next_due()
        for key, (due, off) in list(self.cancelled.items()):
            if nxt is None or nxt > due:
                del self.cancelled[key]
                self.marks.set(tr.MARKER_QID, off, tm.SPENT)

    # ---- expiry --------------------------------------------------------------------------
    def roll_below(self, phys_end: int) -> int:
        """Re-append every pending timer whose record lies below ``phys_end``. Returns how
        many; the caller flushes the store before letting the file go."""
        b = self.store.queue_bounds(tr.TIMER_TOPIC, tr.TIMER_QID)
        if b is None:
            return 0
        cq = self.store.queues.get(tr.TIMER_TOPIC, tr.TIMER_QID)
        bound = cq.first_at_or_after(phys_end, b[0], self.next_off[tr.TIMER_QID])
        n = 0
        for ms, off in sorted(self.index.take_below(bound), key=lambda p: p[1]):
            got = self._record(tr.TIMER_QID, off)
            if got is None or got is RETRY_SOON:
                continue
            _e, msg = got
            props = dict(msg.properties)
            props[tr.P_TIMER_ROLL_TIMES] = str(int(props.get(tr.P_TIMER_ROLL_TIMES, "0") or 0) + 1)
            props.setdefault(tr.P_TIMER_ENQUEUE_MS, str(msg.store_timestamp))
            props[tr.P_TIMER_SRC] = f"{tr.TIMER_QID}:{off}"
            res = self.store.put(tr.TIMER_TOPIC, tr.TIMER_QID, bytes(msg.body), encode_properties(props).encode(),
                                 flag=msg.flag, sysflag=msg.sysflag, born_timestamp=msg.born_timestamp,
                                 born_host=msg.born_host, reconsume_times=msg.reconsume_times,
                                 tag_code=ms, wait_flush=False)
            self._unsettled.append((tr.TIMER_QID, off, tm.ROLLED, res.phys_offset, res.end))
            self.rolled += 1
            n += 1
        return n

    # ---- durability ----------------------------------------------------------------------
    def settle(self) -> None:
        """Write the state bytes of the re-puts that are now in the flushed CommitLog."""
        flushed, dq = self.store.flushed_pos, self._unsettled
        while dq and dq[0][4] <= flushed:
            q, off, state, _start, _end = dq.popleft()
            self.marks.set(q, off, state)

    def checkpoint(self) -> None:
        self.settle()
        scan_from = self._unsettled[0][3] if self._unsettled else self.store.commit_pos
        for q in tm.QUEUES:
            self.low[q] = self.marks.first_pending(q, self.low[q], self.next_off[q])
        # The checkpoint is written before marks below the new low water go: if the write fails
        # (a full disk) or the process dies in between, the old checkpoint still finds every
        # marks file it names; files left below the new low are dropped by the next checkpoint.
        self.marks.write_checkpoint(tm.TimerCheckpoint(scan_from, tuple(self.low)), self.now())
        for q in tm.QUEUES:
            self.marks.drop_below(q, self.low[q])

    def close(self) -> None:
        self.marks.close()

    def stats(self) -> dict[str, int]:
        return {"pending": len(self.index), "delivered": self.delivered, "cancelled": self.cancelled_count,
                "rolled": self.rolled, "dropped": self.dropped, "recalls": len(self.cancelled)}

