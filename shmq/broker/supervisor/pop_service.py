"""POP in the supervisor: the one place that decides which messages a POP hands out, records
acks and invisible-time changes, and revives what was not acked in time (RocketMQ 5's
PopMessageProcessor / AckMessageProcessor / ChangeInvisibleTimeProcessor / PopReviveService,
with the state in pop_state's journal instead of the revive topic). Workers serve the wire
(worker/processors/pop.py) and ask here over the control channel, so whichever worker holds
a consumer's connection, every POP sees the same state.

Control requests (extFields; answers: code 0 and a JSON body where noted):

============  ==============================================================================
POP_RESERVE   group, topic, qid (-1: any), max, it (invisible ms), order, init (0 MIN, 1 MAX),
              tags (comma list of tag hash codes, empty = all), peek (true: no CK, nothing
              moves). Body: {"pt","it","rq","rest","picks":[[topic, qid, start, [offsets],
              [counts]]]}: the messages to answer with (retry topic first, then the topic)
POP_ACK       group, topic (stored), qid, s (ck start), pt (pop time), offsets (comma list)
POP_CHANGE    the same for one offset, plus it: a new CK for it (pop time now), the old acked;
              ext pt, it of the new CK in the answer; code 17 (as RocketMQ's "ck not found"
              is answered NO_MESSAGE) when the CK is gone
MODE_GET      topic, group: body SetMessageRequestModeRequestBody JSON or code 24
MODE_SET      body SetMessageRequestModeRequestBody JSON (persisted)
============  ==============================================================================

Revive (every ``revive_interval``): an expired CK's unacked messages are put to the POP
retry topic ``%RETRY%<group>_<topic>`` with reconsumeTimes + 1, or to ``%DLQ%<group>`` once
reconsumeTimes reaches maxReconsumeTimes, and the CK is closed. An orderly CK is not
revived: the queue's POP offset goes back to its first unacked message, which the next POP
hands out again (in order) with its count in orderCountInfo. A kill -9 between a revive's put
and the CK's close revives that message again (at least once, never lost).
"""
from __future__ import annotations

import json
import logging
import os
import random
import threading
import time

from shmq.protocol import RemotingCommand, ResponseCode
from shmq.protocol.pop_info import ORDER_REVIVE_QID, RETRY_PREFIX, pop_retry_topic
from shmq.service import ThreadService
from shmq.store import files
from shmq.message.record import decode_record

from .pop_state import Checkpoint, PopState

log = logging.getLogger("shmq.broker.pop")
MODE_FILE = "messageRequestMode.json"
NEVER_POPPED = -1


def now_ms() -> int:
    return int(time.time() * 1000)


class PopService:
    def __init__(self, cfg, store, topics, pipeline_getter, *, revive_interval: float = 0.2):
        self.cfg = cfg
        self.store = store
        self.topics = topics
        self._pipeline = pipeline_getter
        self.state = PopState(cfg.store_root, store.cfg.file_mode)
        self.revive_interval = revive_interval
        self.modes = self._load_modes()
        self._lock = threading.Lock()      # the event loop and the revive thread share the state
        self._reviver = ThreadService("shmq-pop-revive", revive_interval, self._round, log=log)
        self._last_sync = 0.0
        self.revived = 0
        #: orderly: (group, topic, qid) -> {offset: times popped} for the re-POP after an expiry
        self._recount: dict[tuple, dict[int, int]] = {}

    def handlers(self) -> dict:
        from shmq.broker.shared.control_channel import Ctl
        return {Ctl.POP_RESERVE: self.reserve, Ctl.POP_ACK: self.ack, Ctl.POP_CHANGE: self.change,
                Ctl.MODE_GET: self.mode_get, Ctl.MODE_SET: self.mode_set}

    def start(self) -> None:
        self._reviver.start()

    def stop(self) -> None:
        self._reviver.stop(10)
        with self._lock:
            if self.state is not None:
                self.state.close()
                self.state = None

    # ---- POP ---------------------------------------------------------------------------
    def _queues(self, group: str, topic: str, qid: int) -> list[tuple[str, int]]:
        retry = pop_retry_topic(group, topic)
        # a POP retry topic has one queue (revive writes queue 0); a lookup, not a table scan
        out = [(retry, 0)] if self.store.queue_bounds(retry, 0) is not None else []
        if qid >= 0:
            return out + [(topic, qid)]
        tc = self.topics.get(topic)
        n = tc.readQueueNums if tc is not None else len(self.store.queues_of(topic))
        qs = list(range(n))
        random.shuffle(qs)
        return out + [(topic, q) for q in qs]

    def _start_offset(self, group: str, topic: str, qid: int, init: int) -> int:
        off = self.state.offsets.get((group, topic, qid))
        if off is not None:
            return off
        committed = self.store.query_offset(group, topic, qid)
        if committed is not None and committed >= 0:
            return committed
        if topic.startswith(RETRY_PREFIX) or init == 0:
            return self.store.min_offset(topic, qid)
        return self.store.max_offset(topic, qid)

    def reserve(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        group, topic = e["group"], e["topic"]
        want, invisible = max(1, int(e.get("max", 32))), max(0, int(e.get("it", 60_000)))
        order, peek = e.get("order") == "true", e.get("peek") == "true"
        tags = {int(t) for t in e.get("tags", "").split(",") if t} or None
        pt = now_ms()
        picks, rest = [], 0
        with self._lock:
            for t, q in self._queues(group, topic, int(e.get("qid", -1))):
                if order and self.state.busy(group, t, q):
                    continue
                start = self._start_offset(group, t, q, int(e.get("init", 0)))
                left = want - sum(len(p[3]) for p in picks)
                if left <= 0:
                    rest += max(0, self.store.max_offset(t, q) - start)
                    continue
                got = self.store.get_messages(t, q, start, max_count=left, tag_codes=tags)
                nxt = max(start, got.next_begin_offset)  # OFFSET_TOO_SMALL: from the queue's minimum
                offs = list(got.queue_offsets)
                if peek:
                    if offs:
                        picks.append([t, q, start, offs, []])
                    continue
                if not offs:
                    if nxt != start:
                        self.state.offsets[(group, t, q)] = nxt  # filtered out: never handed to anyone
                    continue
                ck = Checkpoint(group, t, q, offs[0], pt, invisible, offs, order)
                if order:
                    ck.counts = self._order_counts(group, t, q, offs)
                self.state.add(ck, nxt)
                picks.append([t, q, ck.start, offs, [ck.counts.get(o, 0) for o in offs]])
                pt = ck.pop_time
                rest += max(0, self.store.max_offset(t, q) - nxt)
        body = {"pt": pt, "it": invisible, "rq": ORDER_REVIVE_QID if order else 0, "rest": rest, "picks": picks}
        return cmd.make_response(body=json.dumps(body).encode())

    def _order_counts(self, group, t, q, offs) -> dict[int, int]:
        counts = self._recount.pop((group, t, q), {})
        return {o: counts[o] for o in offs if o in counts}

    # ---- ACK / change ------------------------------------------------------------------
    @staticmethod
    def _key(e: dict) -> tuple:
        return (e["group"], e["topic"], int(e["qid"]), int(e["s"]), int(e["pt"]))

    def ack(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        offsets = [int(o) for o in e.get("offsets", "").split(",") if o]
        with self._lock:
            ck = self.state.ack(self._key(e), offsets)
        return cmd.make_response(ext_fields={"found": "true" if ck is not None else "false"})

    def change(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        off, invisible = int(e["offsets"]), max(0, int(e["it"]))
        with self._lock:
            old = self.state.cks.get(self._key(e))
            if old is None or off not in old.offsets or off in old.acked:
                return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, "ck not found or already acked")
            ck = Checkpoint(old.group, old.topic, old.qid, off, now_ms(), invisible, [off], old.order,
                            counts={off: old.counts[off]} if off in old.counts else {})
            nxt = self.state.offsets.get((old.group, old.topic, old.qid), off + 1)
            self.state.add(ck, nxt)
            self.state.ack(old.key, [off])
        return cmd.make_response(ext_fields={"pt": str(ck.pop_time), "it": str(invisible),
                                             "rq": str(ORDER_REVIVE_QID if ck.order else 0)})

    # ---- revive --------------------------------------------------------------------------
    def _round(self) -> None:
        """One revive round (a failed one is logged by the service; nothing is closed)."""
        self.revive_once()
        if time.monotonic() - self._last_sync >= 1.0:
            self._last_sync = time.monotonic()
            with self._lock:
                self.state.sync()
                self._commit_offsets()

    def revive_once(self, now: int | None = None) -> int:
        now = now_ms() if now is None else now
        with self._lock:
            due = self.state.expired(now)
        n = 0
        for ck in due:
            if ck.order:
                self._expire_orderly(ck)
                continue
            for off in ck.unacked():
                self._revive(ck, off)
                n += 1
            with self._lock:
                if ck.key in self.state.cks:
                    self.state.close_ck(ck)
        self.revived += n
        return n

    def _expire_orderly(self, ck: Checkpoint) -> None:
        with self._lock:
            if ck.key not in self.state.cks:
                return
            un = ck.unacked()
            self._recount[(ck.group, ck.topic, ck.qid)] = {o: ck.counts.get(o, 0) + 1 for o in un}
            self.state.close_ck(ck, rewind_to=min(un) if un else None)

    def _revive(self, ck: Checkpoint, off: int) -> None:
        got = self.store.get_messages(ck.topic, ck.qid, off, max_count=1)
        if not got.messages or got.queue_offsets[0] != off:
            log.warning("POP revive: %s/%d offset %d is gone", ck.topic, ck.qid, off)
            return
        msg = decode_record(got.messages[0])
        normal = ck.topic[len(RETRY_PREFIX) + len(ck.group) + 1:] if ck.topic.startswith(RETRY_PREFIX) else ck.topic
        props = dict(msg.properties)
        props.setdefault("RETRY_TOPIC", normal)
        props.setdefault("ORIGIN_MESSAGE_ID", msg.offset_msg_id)
        times = msg.reconsume_times + 1
        pipeline = self._pipeline()
        if times > self.cfg.maxReconsumeTimes:
            dest, qid = f"%DLQ%{ck.group}", 0
        else:
            dest, qid = pop_retry_topic(ck.group, normal), 0
        pipeline.announce_topic(dest, 1)
        props.pop("DELAY", None)
        pipeline.put_inner(dest, qid, bytes(msg.body), props, flag=msg.flag, sysflag=msg.sysflag,
                           born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                           reconsume_times=times, wait_flush=False)

    def _commit_offsets(self) -> None:
        """Show POP progress as the group's consumer offset (what GET_CONSUME_STATS reads)."""
        for g, t, q in list(self.state.offsets):
            low = self.state.low_offset(g, t, q)
            if low is not None:
                self.store.commit_offset(g, t, q, low)

    # ---- request mode (SET_MESSAGE_REQUEST_MODE) ------------------------------------------
    def _mode_path(self) -> str:
        return os.path.join(self.store.cfg.config_dir, MODE_FILE)

    def _load_modes(self) -> dict:
        try:
            with open(self._mode_path()) as f:
                return json.load(f).get("messageRequestModeMap", {})
        except (FileNotFoundError, ValueError, AttributeError):
            return {}

    def mode_get(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        m = self.modes.get(e["topic"], {}).get(e["group"])
        if m is None:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_NOT_EXIST, "no mode set")
        return cmd.make_response(body=json.dumps(m).encode())

    def mode_set(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        m = json.loads(cmd.body)
        self.modes.setdefault(m["topic"], {})[m["consumerGroup"]] = m
        files.write_atomic(self._mode_path(), json.dumps({"messageRequestModeMap": self.modes}).encode(),
                           self.store.cfg.file_mode)
        return cmd.make_response()
