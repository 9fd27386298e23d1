"""The put pipeline: what happens to a message between "a producer sent it" and "the C append
wrote it". Broker workers (SEND_MESSAGE, SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK), the
supervisor's schedule and transaction services, and local producers all put through here, so
a message is stored the same whichever way it came.

Two stages, as in RocketMQ, where they live in two places:

``PutPipeline.put(req)`` is the send processor's part (SendMessageProcessor):
  1. topic checks (clients may not send to system topics), body size, properties text;
  2. queue choice: queue id -1 picks a random write queue; an id beyond the topic's queues is
     SYSTEM_ERROR (the caller passes the topic's queue counts; 0 = unknown, no check);
  3. to ``%RETRY%G`` with reconsumeTimes >= maxReconsumeTimes: to ``%DLQ%G`` queue 0 instead,
     without delay;
  4. WAIT is dropped from the stored properties (it only tells the broker whether to wait for
     the flush; 4.9.x drops it to save bytes) and CLUSTER = this broker's cluster is added;
  5. TRAN_MSG=true: a half message, stored in RMQ_SYS_TRANS_HALF_TOPIC queue 0 with REAL_TOPIC
     and REAL_QID and the transaction type bits cleared; no delay is applied to a half message
     (Java clients clear DELAY on transactional sends; the commit re-puts it through
     ``put_inner``, which applies any delay then).

``PutPipeline.put_inner(...)`` is the store's part (CommitLog.asyncPutMessage): for a
non-transactional or committed message with DELAY > 0 the level is clamped to the maximum and
the message is stored in SCHEDULE_TOPIC_XXXX queue level-1 with REAL_TOPIC / REAL_QID, its
ConsumeQueue tag code being the due time. Services that re-put stored messages (schedule,
retry, transaction commit) call it directly: they must not pass the client checks again.

Batches (``put_batch``): one queue, no delay, no transaction (MESSAGE_ILLEGAL); the batch-level
properties (minus WAIT, plus CLUSTER) are appended to every entry by the C append.

Errors are exceptions from shmq.errors carrying the RocketMQ response code (``.code``):
InvalidMessage/InvalidTopic 13, a bad queue id 1, store errors their own; FlushDiskTimeout
(10) means stored but not confirmed, and its ``result`` is this module's PipelineResult.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import NamedTuple

from shmq.errors import FlushDiskTimeout, InvalidMessage, ReplicationError, ShmqError
from shmq.message import classify as kinds
from shmq.message.classify import classify
from shmq.message.layout import TX_TYPE_MASK
from shmq.message.names import (CLUSTER, DELAY, HALF_TOPIC, PGROUP, REAL_QID, REAL_TOPIC, RETRY_PREFIX, SCHEDULE_TOPIC,
                                UNIQ_KEY, WAIT, dlq_topic)
from shmq.message.properties import (PROPERTY_SEP, decode_properties, encode_properties, pair, properties_bytes,
                                     stored_properties)
from shmq.native import ffi, lib

from . import timer_rules as tr
from . import validate
from .delay_levels import DEFAULT_LEVELS, DelayLevels

DEFAULT_MAX_RECONSUME_TIMES = 16   # subscription group retryMaxTimes
DLQ_QUEUE_NUMS = 1                 # DLQ_NUMS_PER_GROUP
DEFAULT_CLUSTER = "DefaultCluster"


def tag_code(topic: str, props: bytes, store_ts: int, levels: DelayLevels = DEFAULT_LEVELS) -> int:
    """ConsumeQueue tag code of a record, for ``MessageStore.open(tag_code=...)`` (recovery
    rebuilds CQ entries with it): the due time for SCHEDULE_TOPIC_XXXX records, else the TAGS
    hash. With non-default levels pass ``levels.tag_code`` instead."""
    return levels.tag_code(topic, props, store_ts)


def _delay_level(props: dict) -> int:
    """DELAY as an int (Message.getDelayTimeLevel); 0 when absent."""
    try:
        return kinds.delay_level(props.get(DELAY))
    except ValueError:
        raise InvalidMessage(f"DELAY must be an integer delay level, not {props.get(DELAY)!r}") from None


# ---- request and result --------------------------------------------------------------------
@dataclass(slots=True)
class PutRequest:
    """One send (or one batch with ``batch=True``: ``body`` is then the SEND_BATCH_MESSAGE
    body and ``properties`` the batch-level properties)."""

    topic: str
    body: bytes
    properties: dict | bytes | str = b""
    queue_id: int = -1                   # -1: a random queue of write_queues
    flag: int = 0
    sysflag: int = 0
    born_timestamp: int | None = None    # None: now
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    max_reconsume_times: int | None = None   # None: the pipeline's default (16)
    producer_group: str | None = None    # PGROUP of a half message when the client set none
    batch: bool = False
    write_queues: int = 0                # the topic's write queue count (queue choice)
    read_queues: int = 0                 # with write_queues: ids >= max(both) are refused
    client: bool = True                  # a client send: system topics refused


class PipelineResult:
    """What a send answers with. ``result`` is the store's PutResult (where the record is:
    SCHEDULE_TOPIC_XXXX for a delayed message, the half topic for a prepared one);
    ``topic``/``queue_id`` are where it is headed (after a retry->DLQ rewrite);
    ``request_queue_id`` the queue the send asked for or was given (RocketMQ answers that one
    in the response header's queueId); ``delay_level`` 0 when not delayed."""

    __slots__ = ("result", "topic", "queue_id", "request_queue_id", "delay_level", "half", "deliver_ms",
                 "uniq_key")

    def __init__(self, result, topic: str, queue_id: int, request_queue_id: int,
                 delay_level: int = 0, half: bool = False):
        self.deliver_ms = 0      # a timer message: its due time (TIMER_OUT_MS)
        self.uniq_key = None
        self.result = result
        self.topic = topic
        self.queue_id = queue_id
        self.request_queue_id = request_queue_id
        self.delay_level = delay_level
        self.half = half

    msg_id = property(lambda self: self.result.msg_id)                  # offset msgId
    queue_offset = property(lambda self: self.result.queue_offset)      # in the stored queue
    phys_offset = property(lambda self: self.result.phys_offset)
    store_timestamp = property(lambda self: self.result.store_timestamp)
    size = property(lambda self: self.result.size)
    count = property(lambda self: self.result.count)
    end = property(lambda self: self.result.end)
    stored_topic = property(lambda self: self.result.topic)
    stored_queue_id = property(lambda self: self.result.queue_id)

    def __repr__(self) -> str:
        return (f"PipelineResult(topic={self.topic!r}, queue_id={self.queue_id}, stored={self.result!r}, "
                f"delay_level={self.delay_level}, half={self.half})")


# ---- the pipeline --------------------------------------------------------------------------
class PutPipeline:
    """``PutPipeline(store, cluster_name, delay_levels)``; thread-safe as the store is.

    ``on_new_topic(topic, queue_nums)`` is called before the first put into a topic the
    pipeline itself chose (``%DLQ%G`` here, ``%RETRY%G`` from retry.send_back), so the broker
    can create its topic config (createTopicInSendMessageBackMethod: 1 queue, perm 6) and
    register it. It is called on every such put; keep it cheap (a dict lookup)."""

    def __init__(self, store, cluster_name: str = DEFAULT_CLUSTER, delay_levels: DelayLevels | None = None,
                 *, default_max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES, on_new_topic=None,
                 timer: tr.TimerSettings = tr.DEFAULT_TIMER):
        self.store = store
        self.timer = timer
        self.cluster_name = cluster_name
        self.levels = delay_levels or DEFAULT_LEVELS
        self.default_max_reconsume_times = default_max_reconsume_times
        self.on_new_topic = on_new_topic
        self.cluster_pair = pair(CLUSTER, cluster_name)  # the stored CLUSTER pair
        self._batch_props: dict[str, bytes] = {}
        self._rand = random.Random()

    def fast_writer(self, topic: str, queue_id: int, born_host=("127.0.0.1", 0)) -> "FastWriter":
        return FastWriter(self, topic, queue_id, born_host)

    @property
    def tag_code(self):
        """The recovery tag-code function matching this pipeline's delay levels."""
        return self.levels.tag_code

    # ---- the send processor's stage --------------------------------------------------
    def put(self, req: PutRequest, *, wait_flush: bool = True) -> PipelineResult:
        if req.batch:
            return self.put_batch(req, wait_flush=wait_flush)
        topic = req.topic
        (validate.check_sendable_topic if req.client else validate.check_topic)(topic)
        validate.check_sizes(len(req.body), 0, self.store.cfg.max_message_size)
        qid = self._choose_queue(req)
        raw = properties_bytes(req.properties)
        kind = classify(topic, raw, req.sysflag)
        if kind is kinds.PLAIN or kind in kinds.AS_SENT:  # the common case: no rewrite beyond WAIT and CLUSTER, no dict
            return self._append(topic, qid, req.body, stored_properties(raw, self.cluster_pair), req, topic, qid,
                                qid, 0, False, wait_flush=wait_flush)
        props = decode_properties(raw)
        props.pop(WAIT, None)
        props[CLUSTER] = self.cluster_name
        dest, dest_qid = topic, qid
        if kind is kinds.RETRY:
            max_times = (self.default_max_reconsume_times if req.max_reconsume_times is None
                         else req.max_reconsume_times)
            if req.reconsume_times >= max_times:
                dest, dest_qid = dlq_topic(topic[len(RETRY_PREFIX):]), 0
                props.pop(DELAY, None)  # a dead letter waits for nobody
                self.announce_topic(dest, DLQ_QUEUE_NUMS)
            kind = kinds.kind_of(props, req.sysflag)
        if kind is kinds.HALF:
            if req.producer_group and PGROUP not in props:
                props[PGROUP] = req.producer_group
            return self.put_half(dest, dest_qid, req.body, props, flag=req.flag, sysflag=req.sysflag,
                                 born_timestamp=req.born_timestamp, born_host=req.born_host,
                                 reconsume_times=req.reconsume_times, request_queue_id=qid,
                                 wait_flush=wait_flush)
        return self.put_inner(dest, dest_qid, req.body, props, flag=req.flag, sysflag=req.sysflag,
                              born_timestamp=req.born_timestamp, born_host=req.born_host,
                              reconsume_times=req.reconsume_times, request_queue_id=qid,
                              wait_flush=wait_flush)

    def put_batch(self, req: PutRequest, *, wait_flush: bool = True) -> PipelineResult:
        """A SEND_BATCH_MESSAGE body into one queue. Delay or transaction: MESSAGE_ILLEGAL."""
        topic = req.topic
        (validate.check_sendable_topic if req.client else validate.check_topic)(topic)
        if not req.body:
            raise InvalidMessage("empty batch")
        validate.check_sizes(len(req.body), 0, self.store.cfg.max_message_size)
        if req.sysflag & TX_TYPE_MASK:
            raise InvalidMessage("batch message does not support delay or transaction")
        extra = self.batch_properties(properties_bytes(req.properties).decode())
        qid = self._choose_queue(req)
        try:
            res = self.store.put_batch(topic, qid, req.body, extra, sysflag=req.sysflag,
                                       born_timestamp=req.born_timestamp, born_host=req.born_host,
                                       wait_flush=wait_flush)
        except (FlushDiskTimeout, ReplicationError) as e:
            e.result = PipelineResult(e.result, topic, qid, qid)
            raise
        return PipelineResult(res, topic, qid, qid)

    def batch_properties(self, text: str) -> bytes:
        """The properties stored with every entry of a batch, from the batch-level text:
        WAIT dropped, CLUSTER set. A delayed or transactional batch is MESSAGE_ILLEGAL (as in
        RocketMQ). Cached by text: producers repeat the same few."""
        extra = self._batch_props.get(text)
        if extra is None:
            props = decode_properties(text)
            if kinds.kind_of(props) is not kinds.PLAIN:
                raise InvalidMessage("batch message does not support delay, timer or transaction")
            props.pop(WAIT, None)
            props[CLUSTER] = self.cluster_name
            extra = encode_properties(props).encode()
            if len(self._batch_props) < 1024:
                self._batch_props[text] = extra
        return extra

    # ---- the store's stage -----------------------------------------------------------
    def put_inner(self, topic: str, queue_id: int, body, properties, *, flag: int = 0, sysflag: int = 0,
                  born_timestamp: int | None = None, born_host: tuple[str, int] = ("127.0.0.1", 0),
                  reconsume_times: int = 0, prepared_offset: int = 0, request_queue_id: int | None = None,
                  wait_flush: bool = True) -> PipelineResult:
        """Store a message that passed the send checks (or is re-put by a broker service),
        applying its delay: DELAY > 0 on a non-transactional or committed message sends it to
        SCHEDULE_TOPIC_XXXX queue level-1 (level clamped), REAL_TOPIC/REAL_QID kept, due at
        store time + the level's delay. ``properties`` is stored as given otherwise (no
        CLUSTER, no WAIT handling: callers copy stored properties)."""
        rq = queue_id if request_queue_id is None else request_queue_id
        props = properties if isinstance(properties, dict) else None
        if props is None:
            raw = properties_bytes(properties)
        kind = kinds.kind_of(raw if props is None else props, sysflag)
        if kind is kinds.TIMER:
            props = decode_properties(raw) if props is None else dict(props)
            return self._put_timer(topic, queue_id, body, props, rq, dict(
                flag=flag, sysflag=sysflag, born_timestamp=born_timestamp, born_host=born_host,
                reconsume_times=reconsume_times, prepared_offset=prepared_offset, wait_flush=wait_flush))
        if kind is kinds.DELAYED:
            props = decode_properties(raw) if props is None else dict(props)
            tr.drop_timer_properties(props)  # a DELAY level wins over TIMER_* (checkIfTimerMessage)
            level = self.levels.clamp(_delay_level(props))
            props[DELAY] = str(level)
            props[REAL_TOPIC] = topic
            props[REAL_QID] = str(queue_id)
            return self._append(SCHEDULE_TOPIC, level - 1, body, properties_bytes(props), None, topic, queue_id,
                                rq, level, False, flag=flag, sysflag=sysflag, born_timestamp=born_timestamp,
                                born_host=born_host, reconsume_times=reconsume_times,
                                prepared_offset=prepared_offset, deliver_delay_ms=self.levels.delay_ms(level),
                                wait_flush=wait_flush)
        raw = properties_bytes(props) if props is not None else raw
        return self._append(topic, queue_id, body, raw, None, topic, queue_id, rq, 0, False, flag=flag,
                            sysflag=sysflag, born_timestamp=born_timestamp, born_host=born_host,
                            reconsume_times=reconsume_times, prepared_offset=prepared_offset,
                            wait_flush=wait_flush)

    def _put_timer(self, topic, queue_id, body, props: dict, rq: int, kw: dict) -> PipelineResult:
        """transformTimerMessage (timer_rules): to rmq_sys_wheel_timer, due time as tag code."""
        got = tr.rewrite(topic, queue_id, props, lib.shmq_now_ms(), self.timer)
        if got is None:  # due already: an ordinary message of its topic
            return self._append(topic, queue_id, body, properties_bytes(props), None, topic, queue_id, rq,
                                0, False, **kw)
        tqid, due = got
        res = self._append(tr.TIMER_TOPIC, tqid, body, properties_bytes(props), None, topic, queue_id, rq, 0,
                           False, tag_code=due, **kw)
        res.deliver_ms = due
        res.uniq_key = props.get(UNIQ_KEY)
        return res

    def put_half(self, topic: str, queue_id: int, body, props: dict, *, flag: int = 0, sysflag: int = 0,
                 born_timestamp: int | None = None, born_host: tuple[str, int] = ("127.0.0.1", 0),
                 reconsume_times: int = 0, request_queue_id: int | None = None,
                 wait_flush: bool = True) -> PipelineResult:
        """A transaction's half message (TransactionalMessageBridge.parseHalfMessageInner):
        RMQ_SYS_TRANS_HALF_TOPIC queue 0, REAL_TOPIC/REAL_QID, transaction type cleared so the
        record gets a ConsumeQueue entry the check-back service can scan."""
        props = dict(props)
        props[REAL_TOPIC] = topic
        props[REAL_QID] = str(queue_id)
        rq = queue_id if request_queue_id is None else request_queue_id
        return self._append(HALF_TOPIC, 0, body, properties_bytes(props), None, topic, queue_id, rq, 0, True,
                            flag=flag, sysflag=sysflag & ~TX_TYPE_MASK, born_timestamp=born_timestamp,
                            born_host=born_host, reconsume_times=reconsume_times, wait_flush=wait_flush)

    # ---- helpers ---------------------------------------------------------------------
    def _choose_queue(self, req: PutRequest) -> int:
        qid = req.queue_id
        if qid < 0:
            if req.write_queues <= 0:
                raise ShmqError(f"queue id {qid} for topic {req.topic}: no queue given and the topic's "
                                f"write queue count is unknown", code=1)
            return self._rand.randrange(req.write_queues)
        valid = max(req.write_queues, req.read_queues)
        if valid and qid >= valid:
            # AbstractSendMessageProcessor.msgCheck answers SYSTEM_ERROR for this
            raise ShmqError(f"request queueId[{qid}] is illegal, topic {req.topic} has {valid} queues", code=1)
        return qid

    def announce_topic(self, topic: str, queue_nums: int) -> None:
        """Tell the broker (on_new_topic) that a put into ``topic`` is about to happen."""
        if self.on_new_topic is not None:
            self.on_new_topic(topic, queue_nums)

    def _append(self, stored_topic, stored_qid, body, raw, req, topic, qid, request_qid, level, half, *,
                flag=None, sysflag=None, born_timestamp=None, born_host=None, reconsume_times=None,
                prepared_offset=0, deliver_delay_ms=None, tag_code=None, wait_flush=True) -> PipelineResult:
        if req is not None:
            flag, sysflag, born_timestamp = req.flag, req.sysflag, req.born_timestamp
            born_host, reconsume_times = req.born_host, req.reconsume_times
        try:
            res = self.store.put(stored_topic, stored_qid, body, raw, flag=flag, sysflag=sysflag,
                                 born_timestamp=born_timestamp, born_host=born_host,
                                 reconsume_times=reconsume_times, prepared_offset=prepared_offset,
                                 deliver_delay_ms=deliver_delay_ms, tag_code=tag_code, wait_flush=wait_flush)
        except (FlushDiskTimeout, ReplicationError) as e:
            e.result = PipelineResult(e.result, topic, qid, request_qid, level, half)
            raise
        return PipelineResult(res, topic, qid, request_qid, level, half)


# ---- the one per-queue writer ------------------------------------------------------------
_put = lib.shmq_put
_put_local = lib.shmq_put_local
_put_local_batch = lib.shmq_put_local_batch


class PlainCall(NamedTuple):
    """What a caller makes the ``shmq_put_local`` call with itself (see FastWriter.plain_call)."""
    c_writer: object
    slot: int
    meta: object
    tail: bytes        # \x02 + the CLUSTER pair: appended after the drawn UNIQ_KEY
    tail_len: int
    out: object        # shmq_result *: where the append went
    sync: bool         # SYNC_FLUSH: every append then goes to finish_plain


class Route(NamedTuple):
    """One queue's ``shmq_send`` call (FastWriter.route): ``c`` the bound shmq_route, ``addr`` its
    address (what ``shmq.native.hot_send`` takes), where the id and the offsets land, SYNC_FLUSH."""
    c: object
    addr: int
    id_out: object     # char[32]: the UNIQ_KEY of the last append
    out: object        # shmq_result *
    sync: bool
    keep: tuple        # the buffers the struct points into


class FastWriter:
    """``PutPipeline.fast_writer(topic, qid)``: the store's one writer of one queue for the
    messages ``classify`` stores as sent (PLAIN, TIMER, COMMIT, ROLLBACK), used by the broker's
    send processor (``put_sent``, ``put_sent_batch``) and by the local producer
    (``plain_call``/``finish_plain``, ``put_plain_batch``). Whichever way, the stored properties
    are ``stored_properties``' (WAIT dropped, CLUSTER set), which is what ``PutPipeline.put``
    stores too; callers send every other kind through the full pipeline. Not thread-safe
    (one per thread, or per event loop), like the QueueWriter it wraps."""

    __slots__ = ("pipeline", "topic", "queue_id", "out", "_qw", "_suffix", "_plain", "_scratch", "_max_size",
                 "_cluster")

    def __init__(self, pipeline: "PutPipeline", topic: str, queue_id: int, born_host=("127.0.0.1", 0)):
        validate.check_sendable_topic(topic)
        if classify(topic) is kinds.RETRY:
            raise ShmqError("retry topics go through the full pipeline (DLQ rewrite)")
        self.pipeline = pipeline
        self.topic = topic
        self.queue_id = queue_id
        qw = self._qw = pipeline.store.queue_writer(topic, queue_id, born_host=born_host)
        self._suffix = PROPERTY_SEP.encode() + pipeline.cluster_pair
        self.out = qw.out  # shmq_result *: queue_offset, phys_offset, end, count of the last append
        self._plain = PlainCall(qw.c_writer, qw.slot, qw.meta, self._suffix, len(self._suffix), qw.out, bool(qw.sync))
        self._scratch = None  # a batch's encoding buffer, made at the first batch
        self._max_size = pipeline.store.cfg.max_message_size
        self._cluster = pipeline.cluster_pair

    # ---- a client's message, as it came over the wire (the broker's send) ---------------
    def put_sent(self, body: bytes, props: bytes | str, flag: int, sysflag: int, born_ts: int, born_ip: int,
                 born_port: int, reconsume_times: int) -> int:
        """Store one message with the client's properties text ``props`` (bytes, or the str of
        a remoting header; its kind is one stored as sent); returns the commit position after
        it, for ``wait_flushed`` under SYNC_FLUSH (this does not wait). ``out`` then says where
        it went. (The broker's hot path: the C append is called inline.)"""
        w, slot, m, _, _, out, _ = self._plain
        self._qw.set_origin(flag, sysflag, born_ts, born_ip, born_port, reconsume_times)
        props = stored_properties(props, self._cluster)
        rc = _put(w, slot, m, body, len(body), props, len(props), out)
        while rc:
            self._qw.recover(rc, len(body))
            rc = _put(w, slot, m, body, len(body), props, len(props), out)
        return out.end

    def put_sent_batch(self, batch_body: bytes, props_text: str, sysflag: int, born_ts: int, born_ip: int,
                       born_port: int) -> int:
        """Store a SEND_BATCH_MESSAGE body with its batch-level properties text (refused with
        InvalidMessage when delayed or transactional); returns the commit position after it."""
        if len(batch_body) > self._max_size:
            validate.check_sizes(len(batch_body), 0, self._max_size)
        extra = self.pipeline.batch_properties(props_text)
        qw = self._qw
        qw.set_origin(0, sysflag, born_ts, born_ip, born_port, 0)
        return qw.put_batch_nowait(batch_body, extra)

    def wait_flushed(self, end: int) -> None:
        """SYNC_FLUSH: block until everything below ``end`` is on disk (FlushDiskTimeout)."""
        self._qw.wait_flushed(end)

    # ---- plain sends: the local producer's hot path -------------------------------------
    # A plain message has no DELAY / TRAN_MSG / WAIT / CLUSTER / UNIQ_KEY of its own (the
    # caller checked). Its UNIQ_KEY is drawn and its properties text assembled inside the one
    # C call (shmq_put_local), from ``head`` (user properties, TAGS, KEYS: empty or ending in
    # \x02) and the pipeline's CLUSTER pair. ``uniq`` is the client's id generator (``.c``:
    # its shmq_uniq; ``.roll()``: move to a new month).

    def plain_call(self) -> PlainCall:
        """What a caller makes the ``shmq_put_local`` call with itself (the client's send: no
        Python frame between it and the C append); the 32-char id lands in the caller's
        ``id_out``. Any non-zero status, and every SYNC_FLUSH append, then goes to
        ``finish_plain``."""
        return self._plain

    def route(self, uniq) -> Route:
        """``plain_call``'s arguments bound once into a ``shmq_route`` for ``shmq_send`` (the
        client's send passes only body and head per message); then as ``plain_call``."""
        w, slot, meta, tail, tail_len, out, sync = self._plain
        c = ffi.new("shmq_route *")
        tail_buf = ffi.new("uint8_t[]", tail)
        id_out = ffi.new("char[32]")
        c.w, c.meta, c.u, c.tail, c.out, c.id_out = w, meta, uniq.c, tail_buf, out, id_out
        c.slot, c.tail_len = slot, tail_len
        return Route(c, int(ffi.cast("uintptr_t", c)), id_out, out, sync, (tail_buf, uniq, self))

    def finish_plain(self, rc: int, body: bytes, head: bytes, uniq, id_out) -> int:
        """After a ``shmq_put_local`` that returned ``rc``: map what it asked for (or raise)
        and append again until it succeeds; wait for SYNC_FLUSH; return the queue offset."""
        w, slot, meta, tail, tail_len, out, sync = self._plain
        while rc:
            self._recover(rc, len(body), uniq)
            rc = _put_local(w, slot, meta, body, len(body), head, len(head), uniq.c, tail, tail_len, out, id_out)
        if sync:
            self._qw.wait_flushed(out.end)
        return out.queue_offset

    def put_plain_batch(self, bodies: bytes, body_lens, heads: bytes, head_lens, flags, n: int, size: int,
                        uniq, ids_out) -> int:
        """``n`` plain messages as one batch of at most ``size`` encoded bytes (see
        shmq_put_local_batch for the other arguments); returns the first queue offset."""
        w, slot, meta, _, _, out, sync = self._plain
        if self._scratch is None or len(self._scratch) < size:
            self._scratch = ffi.new("uint8_t[]", max(size * 2, 64 * 1024))
        scratch = self._scratch
        cluster = self.pipeline.cluster_pair
        while True:
            rc = _put_local_batch(w, slot, meta, bodies, body_lens, heads, head_lens, len(heads), flags, n, uniq.c,
                                  cluster, len(cluster), scratch, len(scratch), out, ids_out)
            if rc == 0:
                break
            self._recover(rc, len(bodies), uniq)
        if sync:
            self._qw.wait_flushed(out.end)
        return out.queue_offset

    def _recover(self, rc: int, size: int, uniq) -> None:
        if rc == lib.SHMQ_EMONTH:
            uniq.roll()
        else:
            self._qw.recover(rc, size)
