"""The schedule service: delivers delayed messages when they are due (RocketMQ's
ScheduleMessageService), run by the broker supervisor, which owns the store.

A message with delay level L waits in SCHEDULE_TOPIC_XXXX queue L-1; its ConsumeQueue tag
code is its due time (store time + delay of L, written by the append: see
shmq.store.delay_levels). Each level's queue is in due order (one delay, store times that
never decrease), so the service keeps one progress offset per level and, on every pass, walks
each queue from there while the entries are due: it reads the record, re-puts it to its
REAL_TOPIC / REAL_QID with DELAY removed (messageTimeup: body, flag, sysflag, born timestamp
and host, reconsume times and the other properties kept) and advances the offset. It stops
at the first entry not yet due and sleeps until the earliest known due time or
``poll_interval``, whichever is sooner (new delayed messages are noticed by that poll;
``wake()`` cuts it short).

Progress lives in config/delayOffset.json, RocketMQ's shape ``{"offsetTable":{1:0,2:5}}``
(level keys unquoted, as fastjson writes Integer keys; value = the next offset of queue
level-1), written atomically every ``persist_interval`` and at stop, loaded at start, so a
restarted broker goes on where it stopped and delivers at once what fell due while it was
down.

At-least-once: an offset is persisted only once the re-put it stands for is in the flushed
part of the CommitLog (a power loss cannot keep the progress and lose the re-put); a crash
between a re-put and the next persist delivers that message again after the restart.
"""
from __future__ import annotations

import collections
import errno
import logging
import os
import time

from shmq.errors import InvalidMessage
from shmq.message.names import DELAY, HALF_TOPIC, REAL_QID, REAL_TOPIC, SCHEDULE_TOPIC
from shmq.message.record import decode_record
from shmq.native import lib
from shmq.service import ThreadService
from shmq.store import files
from shmq.store.delay_levels import DelayLevels
from shmq.store.offsets_file import loads_int_keys

log = logging.getLogger("shmq.broker.schedule")

FILE = "delayOffset.json"
RETRY_AFTER_FAILURE_S = 1.0   # a failed re-put is retried after this (the store refused it)
_RETRY_SOON = -1
_PENDING_MAX = 4096           # progress points per level awaiting the flush


def dumps_delay_offsets(table: dict[int, int]) -> str:
    return '{"offsetTable":{' + ",".join(f"{lvl}:{off}" for lvl, off in sorted(table.items())) + "}}"


def load_delay_offsets(config_dir: str) -> dict[int, int]:
    """level -> next offset from config/delayOffset.json; {} when absent or unreadable (a
    damaged file is logged: the queues are then delivered again from their start, which is
    at-least-once, rather than skipped)."""
    path = os.path.join(config_dir, FILE)
    try:
        with open(path) as f:
            data = loads_int_keys(f.read())
        return {int(k): int(v) for k, v in (data.get("offsetTable") or {}).items()}
    except FileNotFoundError:
        return {}
    except (ValueError, OSError, AttributeError, TypeError) as e:
        log.error("cannot read %s (%s): delayed messages will be delivered from the start of their queues",
                  path, e)
        return {}


class ScheduleService(ThreadService):
    """A :class:`shmq.service.ThreadService` (``start()``, ``stop()``, ``wake()``). ``put`` is
    a PutPipeline (its ``put_inner`` is used) or a function with put_inner's signature
    returning something with ``.end``.

    ``keep_real_properties``: RocketMQ 4.9.8's re-put keeps REAL_TOPIC and REAL_QID in the
    delivered message (consumers see them); False strips them too."""

    def __init__(self, store, put, delay_levels: DelayLevels, config_dir: str | None = None,
                 poll_interval: float = 0.1, *, persist_interval: float = 1.0,
                 keep_real_properties: bool = True):
        # A failed round is retried after RETRY_AFTER_FAILURE_S, or sooner if polling is faster.
        super().__init__("shmq-schedule", poll_interval, log=log, first_delay_s=0,
                         error_delay_s=min(poll_interval, RETRY_AFTER_FAILURE_S))
        self.store = store
        self._put = put.put_inner if hasattr(put, "put_inner") else put
        self.levels = delay_levels
        self.config_dir = config_dir or store.cfg.config_dir
        self.poll_interval = poll_interval
        self.persist_interval = persist_interval
        self.keep_real_properties = keep_real_properties
        # Only the service thread touches these two after start (stop() joins it first).
        self.offsets: dict[int, int] = {}          # level -> next offset to look at
        self._pending: dict[int, collections.deque] = {}  # level -> (next offset, re-put end)
        self._last_end: dict[int, int] = {}
        self._durable: dict[int, int] = {}         # what delayOffset.json holds / will hold
        self._written: dict[int, int] | None = None
        self._last_persist = 0.0
        self._disk_full = False  # delayOffset.json held back by a full disk (said once)
        self.delivered = 0                         # re-puts done (stats, tests)
        self.skipped = 0                           # entries that could not be delivered

    # ---- life --------------------------------------------------------------------------
    def start(self) -> None:
        if self.running:
            return
        self.offsets = load_delay_offsets(self.config_dir)
        self._durable = dict(self.offsets)
        self._written = dict(self.offsets)
        self._last_persist = time.monotonic()
        super().start()

    def stop(self, timeout: float = 5.0) -> bool:
        """Stop delivering, make the re-puts durable and persist the progress. Call it before
        the store is closed."""
        if not self.running:
            return True
        if not super().stop(timeout):
            log.error("schedule thread did not stop within %.1fs; progress not persisted", timeout)
            return False
        if getattr(self.store, "_closed", False):
            # the control block is unmapped: touching it would crash; keep what is known durable
            log.error("schedule service stopped after its store was closed; persisting the last durable progress")
            self._write(self._durable)
            return True
        try:
            if self.store.commit_pos > self.store.flushed_pos:
                self.store.flush()
        except Exception as e:  # noqa: BLE001 - the unflushed part is simply delivered again
            log.warning("flush before persisting delay progress failed: %s", e)
        self.persist()
        return True

    # ---- the rounds ------------------------------------------------------------------------
    def round(self) -> float:
        """Deliver what is due, persist the progress when due (also after a failed pass),
        then wait until the earliest entry seen comes due or ``poll_interval``."""
        try:
            wait = self.run_once()
        finally:
            if time.monotonic() - self._last_persist >= self.persist_interval:
                self._last_persist = time.monotonic()
                self._persist_or_say()
        return self.poll_interval if wait is None else min(self.poll_interval, wait)

    def _persist_or_say(self) -> None:
        """Persist the progress; a full disk is said once (the old file stays whole, the next
        round tries again), any other failure each time with its traceback."""
        try:
            self.persist()
        except OSError as e:
            if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                log.exception("cannot write %s", FILE)
            elif not self._disk_full:
                log.error("cannot write %s: %s; retrying", FILE, e)
            self._disk_full = e.errno in (errno.ENOSPC, errno.EDQUOT)
            return
        if self._disk_full:
            self._disk_full = False
            log.warning("%s written again: the disk has room", FILE)

    def run_once(self) -> float | None:
        """One pass over every level: deliver what is due. Returns the seconds until the
        earliest entry seen that is not yet due (None when none is waiting)."""
        earliest: float | None = None
        for level, delay in self.levels:
            if self.stopping:
                break
            w = self._deliver_level(level, delay)
            if w is not None and (earliest is None or w < earliest):
                earliest = w
        return earliest

    def _deliver_level(self, level: int, delay: int) -> float | None:
        store = self.store
        qid = level - 1
        bounds = store.queue_bounds(SCHEDULE_TOPIC, qid)
        if bounds is None:
            return None
        mn, mx = bounds
        off = self.offsets.get(level, 0)
        if off < mn or off > mx:
            # The queue was cleaned below us, or it is younger than the progress file
            # (correctDelayOffset): continue from the nearest offset that exists.
            log.error("delay level %d: progress %d outside the queue [%d, %d]; continuing from %d",
                      level, off, mn, mx, min(max(off, mn), mx))
            off = min(max(off, mn), mx)
            self._advanced(level, off, 0)
        cq = store.queues.get(SCHEDULE_TOPIC, qid)
        wait = None
        while off < mx and not self.stopping:
            e = cq.entry(off)
            if e is None:
                if off < store.min_offset(SCHEDULE_TOPIC, qid):
                    off = store.min_offset(SCHEDULE_TOPIC, qid)
                    self._advanced(level, off, 0)
                    continue
                wait = self.poll_interval  # published but not readable yet: look again soon
                break
            phys, _size, due = e
            now = lib.shmq_now_ms()
            if due > now + delay:
                due = now  # a due time beyond now + delay (the clock went back): deliver now
            if due > now:
                wait = (due - now) / 1000.0
                break
            end = self._deliver_entry(level, off, phys)
            if end is None or end == _RETRY_SOON:
                wait = self.poll_interval if end == _RETRY_SOON else RETRY_AFTER_FAILURE_S
                break
            off += 1
            self._advanced(level, off, end)
        return wait

    def _deliver_entry(self, level: int, off: int, phys: int) -> int | None:
        """Re-put one due record. Returns the end of the re-put in the CommitLog; 0 when the
        entry is skipped for good (its record is gone or unusable); None when the re-put
        failed and must be retried later, _RETRY_SOON when the record is not readable yet
        (the progress is then left at ``off``)."""
        store = self.store
        rec = store.read_at(phys)
        if rec is None:
            if phys < store.cb.ctl.pos.min_pos:
                log.warning("delay level %d offset %d: record at %d was already deleted", level, off, phys)
                self.skipped += 1
                return 0
            return _RETRY_SOON  # not committed yet (the entry is published first)
        try:
            msg = decode_record(rec)
        except Exception as e:  # noqa: BLE001 - a damaged record must not block the level
            log.error("delay level %d offset %d: unreadable record at %d (%s); skipped", level, off, phys, e)
            self.skipped += 1
            return 0
        props = dict(msg.properties)
        props.pop(DELAY, None)
        topic = props.get(REAL_TOPIC)
        try:
            queue_id = int(props.get(REAL_QID, ""))
        except ValueError:
            queue_id = -1
        if not topic or queue_id < 0 or topic == HALF_TOPIC:
            log.error("delay level %d offset %d: record at %d has no usable REAL_TOPIC/REAL_QID (%r, %r); "
                      "discarded", level, off, phys, topic, props.get(REAL_QID))
            self.skipped += 1
            return 0
        if not self.keep_real_properties:
            props.pop(REAL_TOPIC, None)
            props.pop(REAL_QID, None)
        try:
            res = self._put(topic, queue_id, bytes(msg.body), props, flag=msg.flag, sysflag=msg.sysflag,
                            born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                            reconsume_times=msg.reconsume_times, wait_flush=False)
        except InvalidMessage as e:
            # the store will never take it (e.g. an invalid REAL_TOPIC): retrying would block the level
            log.error("delay level %d offset %d: %s/%d refuses the message (%s); discarded",
                      level, off, topic, queue_id, e)
            self.skipped += 1
            return 0
        except Exception as e:  # noqa: BLE001 - retried; the message stays in its level queue
            log.warning("delay level %d offset %d: re-put to %s/%d failed (%s); retrying in %.1fs",
                        level, off, topic, queue_id, e, RETRY_AFTER_FAILURE_S)
            return None
        self.delivered += 1
        return res.end

    def _advanced(self, level: int, off: int, end: int) -> None:
        # A skip (end 0) counts as durable only with the re-puts before it, so it carries the
        # last end; ends then never decrease and the bounded deque may drop its oldest points
        # (persisting then advances in coarser steps, never past an unflushed re-put).
        end = max(end, self._last_end.get(level, 0))
        self._last_end[level] = end
        self.offsets[level] = off
        q = self._pending.get(level)
        if q is None:
            q = self._pending[level] = collections.deque(maxlen=_PENDING_MAX)
        q.append((off, end))

    # ---- progress ------------------------------------------------------------------------
    def persist(self) -> None:
        """Write delayOffset.json with, per level, the furthest offset whose re-put is in
        the flushed CommitLog (if it changed)."""
        flushed = self.store.flushed_pos
        for level, q in self._pending.items():
            while q and q[0][1] <= flushed:
                self._durable[level] = q.popleft()[0]
        self._write(self._durable)

    def _write(self, table: dict[int, int]) -> None:
        if table == self._written:
            return
        table = dict(table)
        files.write_atomic(os.path.join(self.config_dir, FILE), dumps_delay_offsets(table).encode())
        self._written = table

    def progress(self) -> dict[int, int]:
        """level -> next offset in memory (delivered up to here)."""
        return dict(self.offsets)

    def running_stats(self) -> dict[str, str]:
        """GET_BROKER_RUNTIME_INFO's ``scheduleMessageOffset_<level>`` = "progress,max offset"
        (ScheduleMessageService.buildRunningStats), for the levels with progress."""
        return {f"scheduleMessageOffset_{lvl}": f"{off},{self.store.max_offset(SCHEDULE_TOPIC, lvl - 1)}"
                for lvl, off in sorted(self.progress().items())}
