"""The put pipeline: what happens to a message between "a producer sent it" and "the C append
wrote it". Broker workers (SEND_MESSAGE, SEND_BATCH_MESSAGE, CONSUMER_SEND_MSG_BACK), the
supervisor's schedule and transaction services, and local producers all put through here, so
a message is stored the same whichever way it came (DESIGN §4).

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

from shmq.errors import FlushDiskTimeout, InvalidMessage, ReplicationError, ShmqError
from shmq.native import ffi, lib

from . import validate
from .delay_levels import DEFAULT_LEVELS, SCHEDULE_TOPIC, DelayLevels
from .record import (NAME_VALUE_SEP, PROPERTY_SEP, TX_COMMIT_TYPE, TX_NOT_TYPE, TX_TYPE_MASK,
                     decode_properties, encode_properties)

# ---- names (MessageConst, MixAll, TopicValidator) ------------------------------------------
P_TAGS = "TAGS"
P_KEYS = "KEYS"
P_UNIQ_KEY = "UNIQ_KEY"
P_WAIT = "WAIT"
P_DELAY = "DELAY"
P_CLUSTER = "CLUSTER"
P_REAL_TOPIC = "REAL_TOPIC"
P_REAL_QID = "REAL_QID"
P_TRAN_MSG = "TRAN_MSG"
P_PGROUP = "PGROUP"
P_RETRY_TOPIC = "RETRY_TOPIC"
P_ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
P_RECONSUME_TIME = "RECONSUME_TIME"
P_MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"

RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
DEFAULT_MAX_RECONSUME_TIMES = 16   # subscription group retryMaxTimes
DLQ_QUEUE_NUMS = 1                 # DLQ_NUMS_PER_GROUP
DEFAULT_CLUSTER = "DefaultCluster"


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


def tag_code(topic: str, props: bytes, store_ts: int, levels: DelayLevels = DEFAULT_LEVELS) -> int:
    """ConsumeQueue tag code of a record, for ``MessageStore.open(tag_code=...)`` (recovery
    rebuilds CQ entries with it): the due time for SCHEDULE_TOPIC_XXXX records, else the TAGS
    hash. With non-default levels pass ``levels.tag_code`` instead."""
    return levels.tag_code(topic, props, store_ts)


# ---- properties as bytes -------------------------------------------------------------------
# The common send (no DELAY, no TRAN_MSG) never builds a dict: WAIT is cut out of the bytes and
# CLUSTER appended. A name counts only at the start of a pair (start of text or after \2).
_SEP = PROPERTY_SEP.encode()
_NV = NAME_VALUE_SEP.encode()


def _pair_start(raw: bytes, name: bytes) -> int:
    """Index of the pair ``name\\1...`` in raw, or -1. ``name`` ends with \\1."""
    if raw.startswith(name):
        return 0
    i = raw.find(_SEP + name)
    return -1 if i < 0 else i + 1


def _drop_pair(raw: bytes, name: bytes) -> bytes:
    while (i := _pair_start(raw, name)) >= 0:
        j = raw.find(_SEP, i)
        if j < 0:
            raw = raw[:max(i - 1, 0)]
        else:
            raw = raw[:i] + raw[j + 1:]
    return raw


def _append_pair(raw: bytes, pair: bytes) -> bytes:
    if not raw:
        return pair
    return raw + pair if raw.endswith(_SEP) else raw + _SEP + pair


_W, _C, _D, _T = (n.encode() + _NV for n in (P_WAIT, P_CLUSTER, P_DELAY, P_TRAN_MSG))


def properties_bytes(props) -> bytes:
    """The stored text of ``props`` (dict, str or bytes), checked: names and values of a dict
    may not hold the separators \\1 and \\2; text must be UTF-8."""
    if isinstance(props, dict):
        for k, v in props.items():
            if not isinstance(k, str) or not isinstance(v, str):
                raise InvalidMessage(f"property {k!r}: names and values must be strings")
            if NAME_VALUE_SEP in k or PROPERTY_SEP in k or NAME_VALUE_SEP in v or PROPERTY_SEP in v:
                raise InvalidMessage(f"property {k!r} holds a separator character (\\1 or \\2)")
        return encode_properties(props)
    if isinstance(props, str):
        return props.encode()
    raw = bytes(props) if props else b""
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidMessage(f"properties are not UTF-8 text: {e}") from None
    return raw


def _delay_level(props: dict) -> int:
    """DELAY as an int (Message.getDelayTimeLevel); 0 when absent."""
    v = props.get(P_DELAY)
    if v is None:
        return 0
    try:
        return int(v.strip())
    except ValueError:
        raise InvalidMessage(f"DELAY must be an integer delay level, not {v!r}") from None


def _is_true(v: str | None) -> bool:
    return v is not None and v.strip().lower() == "true"  # Boolean.parseBoolean


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

    __slots__ = ("result", "topic", "queue_id", "request_queue_id", "delay_level", "half")

    def __init__(self, result, topic: str, queue_id: int, request_queue_id: int,
                 delay_level: int = 0, half: bool = False):
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
                 *, default_max_reconsume_times: int = DEFAULT_MAX_RECONSUME_TIMES, on_new_topic=None):
        self.store = store
        self.cluster_name = cluster_name
        self.levels = delay_levels or DEFAULT_LEVELS
        self.default_max_reconsume_times = default_max_reconsume_times
        self.on_new_topic = on_new_topic
        self._cluster_pair = _C + cluster_name.encode()
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
        max_times = (self.default_max_reconsume_times if req.max_reconsume_times is None
                     else req.max_reconsume_times)
        to_dlq = topic.startswith(RETRY_PREFIX) and req.reconsume_times >= max_times
        if not to_dlq and _pair_start(raw, _D) < 0 and _pair_start(raw, _T) < 0:
            # the common case: no rewrite beyond WAIT and CLUSTER, no dict
            raw = _append_pair(_drop_pair(_drop_pair(raw, _W), _C), self._cluster_pair)
            return self._append(topic, qid, req.body, raw, req, topic, qid, qid, 0, False,
                                wait_flush=wait_flush)
        props = decode_properties(raw)
        props.pop(P_WAIT, None)
        props[P_CLUSTER] = self.cluster_name
        dest, dest_qid = topic, qid
        if to_dlq:
            dest, dest_qid = dlq_topic(topic[len(RETRY_PREFIX):]), 0
            props.pop(P_DELAY, None)  # a dead letter waits for nobody
            self.announce_topic(dest, DLQ_QUEUE_NUMS)
        if _is_true(props.get(P_TRAN_MSG)):
            if req.producer_group and P_PGROUP not in props:
                props[P_PGROUP] = req.producer_group
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
        props = decode_properties(properties_bytes(req.properties))
        if _delay_level(props) > 0:
            raise InvalidMessage("a batch cannot be delayed (DELAY is not supported for batch messages)")
        if req.sysflag & TX_TYPE_MASK or _is_true(props.get(P_TRAN_MSG)):
            raise InvalidMessage("a batch cannot be a transactional message")
        qid = self._choose_queue(req)
        props.pop(P_WAIT, None)
        props[P_CLUSTER] = self.cluster_name
        try:
            res = self.store.put_batch(topic, qid, req.body, encode_properties(props), sysflag=req.sysflag,
                                       born_timestamp=req.born_timestamp, born_host=req.born_host,
                                       wait_flush=wait_flush)
        except (FlushDiskTimeout, ReplicationError) as e:
            e.result = PipelineResult(e.result, topic, qid, qid)
            raise
        return PipelineResult(res, topic, qid, qid)

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
            if _pair_start(raw, _D) >= 0:
                props = decode_properties(raw)
        tx = sysflag & TX_TYPE_MASK
        level = _delay_level(props) if props is not None and tx in (TX_NOT_TYPE, TX_COMMIT_TYPE) else 0
        if level > 0:
            level = self.levels.clamp(level)
            props = dict(props)
            props[P_DELAY] = str(level)
            props[P_REAL_TOPIC] = topic
            props[P_REAL_QID] = str(queue_id)
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

    def put_half(self, topic: str, queue_id: int, body, props: dict, *, flag: int = 0, sysflag: int = 0,
                 born_timestamp: int | None = None, born_host: tuple[str, int] = ("127.0.0.1", 0),
                 reconsume_times: int = 0, request_queue_id: int | None = None,
                 wait_flush: bool = True) -> PipelineResult:
        """A transaction's half message (TransactionalMessageBridge.parseHalfMessageInner):
        RMQ_SYS_TRANS_HALF_TOPIC queue 0, REAL_TOPIC/REAL_QID, transaction type cleared so the
        record gets a ConsumeQueue entry the check-back service can scan."""
        props = dict(props)
        props[P_REAL_TOPIC] = topic
        props[P_REAL_QID] = str(queue_id)
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
                prepared_offset=0, deliver_delay_ms=None, wait_flush=True) -> PipelineResult:
        if req is not None:
            flag, sysflag, born_timestamp = req.flag, req.sysflag, req.born_timestamp
            born_host, reconsume_times = req.born_host, req.reconsume_times
        try:
            res = self.store.put(stored_topic, stored_qid, body, raw, flag=flag, sysflag=sysflag,
                                 born_timestamp=born_timestamp, born_host=born_host,
                                 reconsume_times=reconsume_times, prepared_offset=prepared_offset,
                                 deliver_delay_ms=deliver_delay_ms, wait_flush=wait_flush)
        except (FlushDiskTimeout, ReplicationError) as e:
            e.result = PipelineResult(e.result, topic, qid, request_qid, level, half)
            raise
        return PipelineResult(res, topic, qid, request_qid, level, half)


# ---- the common case, fast --------------------------------------------------------------
_put_local = lib.shmq_put_local
_put_local_batch = lib.shmq_put_local_batch


class FastWriter:
    """``PutPipeline.fast_writer(topic, qid)``: the pipeline's common case (a client send to
    an ordinary topic with no DELAY, no TRAN_MSG, no WAIT) as one C append: the only rewrite
    is CLUSTER appended, which is what ``put`` does too. The caller keeps anything else on
    the full pipeline, so a message is stored the same whichever way it went. Not
    thread-safe (one per thread), like the store's QueueWriter it wraps."""

    __slots__ = ("pipeline", "topic", "queue_id", "_qw", "_suffix", "_out", "_plain", "_scratch")

    def __init__(self, pipeline: "PutPipeline", topic: str, queue_id: int, born_host=("127.0.0.1", 0)):
        validate.check_sendable_topic(topic)
        if topic.startswith(RETRY_PREFIX):
            raise ShmqError("retry topics go through the full pipeline (DLQ rewrite)")
        self.pipeline = pipeline
        self.topic = topic
        self.queue_id = queue_id
        self._qw = pipeline.store.queue_writer(topic, queue_id, born_host=born_host)
        self._suffix = PROPERTY_SEP.encode() + pipeline._cluster_pair
        qw = self._qw
        self._out = qw._out
        self._plain = (qw._w, qw._slot, qw._meta)
        self._scratch = None  # a batch's encoding buffer, made at the first batch

    # ---- plain sends: the client's hot path ---------------------------------------------
    # A plain message has no DELAY / TRAN_MSG / WAIT / CLUSTER / UNIQ_KEY of its own (the
    # caller checked). Its UNIQ_KEY is drawn and its properties text assembled inside the one
    # C call (shmq_put_local), from ``head`` (user properties, TAGS, KEYS: empty or ending in
    # \x02) and the pipeline's CLUSTER pair. ``uniq`` is the client's id generator (``.c``:
    # its shmq_uniq; ``.roll()``: move to a new month).

    def plain_call(self) -> tuple:
        """(writer, slot, meta, tail, tail length, result, sync): what a caller makes the
        ``shmq_put_local`` call with itself (the client's send: no Python frame between it and
        the C append); the 32-char id lands in the caller's ``id_out``. Any non-zero status,
        and every SYNC_FLUSH append, then goes to ``finish_plain``."""
        w, slot, meta = self._plain
        return w, slot, meta, self._suffix, len(self._suffix), self._out, bool(self._qw._sync)

    def finish_plain(self, rc: int, body: bytes, head: bytes, uniq, id_out) -> int:
        """After a ``shmq_put_local`` that returned ``rc``: map what it asked for (or raise)
        and append again until it succeeds; wait for SYNC_FLUSH; return the queue offset."""
        w, slot, meta = self._plain
        out = self._out
        while rc:
            self._recover(rc, len(body), uniq)
            rc = _put_local(w, slot, meta, body, len(body), head, len(head), uniq.c, self._suffix, len(self._suffix),
                            out, id_out)
        if self._qw._sync:
            self._qw._wait(out.end)
        return out.queue_offset

    def put_plain_batch(self, bodies: bytes, body_lens, heads: bytes, head_lens, flags, n: int, size: int,
                        uniq, ids_out) -> int:
        """``n`` plain messages as one batch of at most ``size`` encoded bytes (see
        shmq_put_local_batch for the other arguments); returns the first queue offset."""
        w, slot, meta = self._plain
        out = self._out
        if self._scratch is None or len(self._scratch) < size:
            self._scratch = ffi.new("uint8_t[]", max(size * 2, 64 * 1024))
        scratch = self._scratch
        pair = self.pipeline._cluster_pair
        while True:
            rc = _put_local_batch(w, slot, meta, bodies, body_lens, heads, head_lens, len(heads), flags, n, uniq.c,
                                  pair, len(pair), scratch, len(scratch), out, ids_out)
            if rc == 0:
                break
            self._recover(rc, len(bodies), uniq)
        if self._qw._sync:
            self._qw._wait(out.end)
        return out.queue_offset

    def _recover(self, rc: int, size: int, uniq) -> None:
        if rc == lib.SHMQ_EMONTH:
            uniq.roll()
        else:
            self._qw._appender.recover(rc, size)
