"""SEND_MESSAGE (10), SEND_MESSAGE_V2 (310), SEND_BATCH_MESSAGE (320), CONSUMER_SEND_MSG_BACK
(36) and END_TRANSACTION (37): RocketMQ's ``SendMessageProcessor`` and its checks.

Order of checks (``AbstractSendMessageProcessor.msgCheck``): broker writable (16), topic
name valid (1), topic a client may send to (16), topic known or creatable from its
defaultTopic (17), topic writable (16), queue id in range (1). Then the stored message gets
bornHost = the peer, storeHost = this broker, CLUSTER added and WAIT dropped (§5.1). The
append is synchronous C on the event loop (microseconds); only a SYNC_FLUSH wait leaves the
loop (a thread waits on the store's flush futex).

The fast path (known topic, ASYNC_FLUSH) returns the response directly, so the transport
answers it inline without creating a task; only a send that needs the supervisor (unknown
topic) becomes a coroutine. A send that waits for its flush (SYNC_FLUSH) or a slave
(SYNC_MASTER) is deferred (``conn.defer``): the Confirmer answers it with the others its
group commit covers, in one callback of the loop.
"""
from __future__ import annotations

import asyncio
import random

from shmq.broker.shared import control_channel as cc
from shmq.broker.shared.control_channel import Ctl
from shmq.broker.shared.topics import queue_count
from shmq.errors import FlushDiskTimeout, FlushFailed, InvalidMessage, InvalidTopic, MessageTooLarge
from shmq.message.classify import AS_SENT, PLAIN, RETRY, classify
from shmq.message.msgid import batch_msg_ids, host_prefix, offset_msg_id_after
from shmq.message.names import PERM_WRITE, RETRY_PREFIX
from shmq.protocol import FLAG_ONEWAY, RemotingCommand, RequestCode, ResponseCode
from shmq.protocol.bodies import TopicConfig, encode_json
from shmq.protocol.headers import (ConsumerSendMsgBackRequestHeader, EndTransactionRequestHeader,
                                   SendMessageRequestHeader, decode_send_header)
from shmq.store import recall, transaction, validate
from shmq.store.put import PutRequest

from .. import retry
from ..confirm import Confirmer
from ..context import WorkerContext, born_host
from .send_fast import FastSends, born_ints, send_ext

_FAQ = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


def _topic_name_error(topic: str) -> str | None:
    """TopicValidator.validateTopic's remark, or None when the name is fine."""
    if not topic:
        return "The specified topic is blank."
    if len(topic) > validate.TOPIC_MAX:
        return "The specified topic is longer than topic max length."
    if not validate.TOPIC_RE.match(topic):
        return "The specified topic contains illegal characters, allowing only ^[%|a-zA-Z0-9_-]+$"
    return None


class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker
        self.cfg = worker.cfg
        self._id_prefix: str | None = None
        self._writers: dict[tuple[str, int], object] = {}
        self._confirmer: Confirmer | None = None  # SYNC_FLUSH / SYNC_MASTER waits, made on first use
        self._fast: FastSends | None = None  # the C path, when fast_path made it

    def fast_path(self) -> FastSends | None:
        """The C path for plain sends (send_fast.py) for the worker's connections, or None under
        SYNC_MASTER (its refusals without a slave are answered before the put: Python's). Under
        SYNC_FLUSH its answers wait in this processor's Confirmer like the Python path's."""
        if self.w.store.sync_master:
            return None
        self._fast = FastSends(self.w, self._confirm if self.w.store.sync_flush else None)
        return self._fast

    def _confirm(self) -> Confirmer:
        c = self._confirmer
        if c is None:
            c = self._confirmer = Confirmer(self.w.store, asyncio.get_running_loop())
        return c

    def handlers(self):
        return {
            RequestCode.SEND_MESSAGE: self.send,
            RequestCode.SEND_MESSAGE_V2: self.send,
            RequestCode.SEND_BATCH_MESSAGE: self.send,
            RequestCode.CONSUMER_SEND_MSG_BACK: self.send_back,
            RequestCode.END_TRANSACTION: self.end_transaction,
        }

    # ------------------------------------------------------------------ checks ----
    def _check(self, cmd: RemotingCommand, h: SendMessageRequestHeader) -> RemotingCommand | TopicConfig | None:
        """A refusal, the topic's config, or None when the topic must be looked up/created."""
        why = _topic_name_error(h.topic)
        if why is not None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, why)
        if h.topic in validate.SYSTEM_TOPICS:
            return cmd.make_response(ResponseCode.NO_PERMISSION, f"Sending message to topic[{h.topic}] is forbidden.")
        return self.w.topics.get(h.topic)

    def _check_topic(self, cmd: RemotingCommand, h: SendMessageRequestHeader, tc: TopicConfig | None):
        if tc is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                     f"topic[{h.topic}] not exist, apply first please!{_FAQ}")
        # RocketMQ 4.9.8's msgCheck: a broker without write permission refuses order topics
        # only (clients route around it otherwise); a topic's own permission is not checked
        # on send (clients leave unwritable queues out of their routes).
        if not self.cfg.brokerPermission & PERM_WRITE and tc.order:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.cfg.brokerIP1}] sending message is forbidden")
        if h.queueId >= queue_count(tc):
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"request queueId[{h.queueId}] is illegal, {tc} Producer: {h.producerGroup}")
        return None

    # ------------------------------------------------------------------ send ----
    def send(self, conn, cmd: RemotingCommand):
        h = _fast_v2(cmd.ext_fields) if cmd.code != RequestCode.SEND_MESSAGE else None
        if h is None:
            h = decode_send_header(cmd.code, cmd.ext_fields)  # also names a missing or bad field
        r = self._check(cmd, h)
        if isinstance(r, RemotingCommand):
            return r
        if r is None:
            return self._send_after_lookup(conn, cmd, h)
        return self._send_checked(conn, cmd, h, r)

    async def _send_after_lookup(self, conn, cmd, h):
        tc = await self.w.fetch_topic(h.topic)
        if tc is None and h.defaultTopic:
            tc = await self.w.auto_create_topic(h.topic, h.defaultTopic, h.defaultTopicQueueNums, h.sysFlag)
        if tc is None and h.topic.startswith(RETRY_PREFIX):
            tc = await self.w.auto_create_topic(h.topic, "", 1, 0)
        return self._send_checked(conn, cmd, h, tc)

    def _send_checked(self, conn, cmd, h: SendMessageRequestHeader, tc: TopicConfig | None):
        bad = self._check_topic(cmd, h, tc)
        if bad is not None:
            return bad
        qid = h.queueId if h.queueId >= 0 else random.randrange(max(1, tc.writeQueueNums))
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
            return self._put_batch(conn, cmd, h, qid, tc)
        props = h.properties or ""
        kind = classify(h.topic, props, h.sysFlag)
        if kind is not PLAIN and kind not in AS_SENT:
            # delay (SCHEDULE_TOPIC_XXXX), timers (rmq_sys_wheel_timer), half messages and
            # retry -> DLQ are the put pipeline's
            return self._put_pipeline(conn, cmd, h, qid, tc)
        fw = self._writer(h.topic, qid)
        self.w.stats["put"] += 1
        end = fw.put_sent(cmd.body, props, h.flag, h.sysFlag, h.bornTimestamp, *born_ints(conn), h.reconsumeTimes or 0)
        self.w.holds.appended()
        if self._fast is not None and kind is PLAIN and h.queueId == qid and not tc.order \
                and cmd.code == RequestCode.SEND_MESSAGE_V2:
            self._fast.learn(h.topic, qid, tc, fw)  # the next ones to this queue may take the C path
        sync = self.w.store.sync_wait
        if cmd.flag & FLAG_ONEWAY and not sync:
            return None  # an answer nobody reads (the transport would drop it) is not built
        out = fw.out
        ext = send_ext(offset_msg_id_after(self._prefix(), out.phys_offset), qid, out.queue_offset)
        if sync:
            return self._answer_after_flush(conn, cmd, end, ext)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext)

    def _put_pipeline(self, conn, cmd, h: SendMessageRequestHeader, qid: int, tc: TopicConfig):
        req = PutRequest(
            topic=h.topic, body=cmd.body, properties=h.properties or b"", queue_id=qid, flag=h.flag,
            sysflag=h.sysFlag, born_timestamp=h.bornTimestamp, born_host=born_host(conn),
            reconsume_times=h.reconsumeTimes or 0,
            max_reconsume_times=retry.max_reconsume_times_of(cmd.version, h.maxReconsumeTimes,
                                                             self.cfg.maxReconsumeTimes),
            producer_group=h.producerGroup, write_queues=tc.writeQueueNums, read_queues=tc.readQueueNums)
        pr = self.w.pipeline.put(req, wait_flush=False)
        self.w.holds.appended()
        self.w.stats["put"] += 1
        if pr.half:
            self._register_tx_producer(conn, h.producerGroup)
        # RocketMQ answers the queue the send asked for and the offset where it was stored.
        r = self._answer(conn, cmd, pr.result, pr.msg_id, pr.request_queue_id, pr.queue_offset)
        if pr.deliver_ms and pr.uniq_key and not h.topic.startswith(RETRY_PREFIX) and r is not None:
            # SendMessageProcessor.attachRecallHandle (5.3.3): what RECALL_MESSAGE takes back
            r.ext_fields["recallHandle"] = recall.build_handle(h.topic, self.cfg.brokerName, pr.deliver_ms + 1,
                                                               pr.uniq_key)
        return r

    def _put_batch(self, conn, cmd, h: SendMessageRequestHeader, qid: int, tc: TopicConfig):
        if classify(h.topic) is RETRY:
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {h.topic}")
        fw = self._writer(h.topic, qid)
        try:
            end = fw.put_sent_batch(cmd.body, h.properties or "", h.sysFlag, h.bornTimestamp, *born_ints(conn))
        except InvalidMessage as e:
            if isinstance(e, MessageTooLarge):
                raise
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, str(e))
        self.w.holds.appended()
        if self._fast is not None and h.queueId == qid and not tc.order and cmd.code == RequestCode.SEND_BATCH_MESSAGE:
            self._fast.learn_batch(h.topic, qid, tc, fw, h.properties or "")  # the next such may take the C path
        out = fw.out
        self.w.stats["put"] += out.count
        store = self.w.store
        ids = batch_msg_ids(self._prefix(), store.queues.get(h.topic, qid).phys_hex(out.queue_offset, out.count))
        ext = send_ext(ids, qid, out.queue_offset)
        if store.sync_wait:
            return self._answer_after_flush(conn, cmd, end, ext)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext)

    def _register_tx_producer(self, conn, group: str) -> None:
        """A connection that sends half messages of ``group`` is a producer of it, heartbeat
        or not: a check-back must be able to reach it (clients heartbeat a broker only every
        30 s, and may first learn of it from the route they send on)."""
        groups = conn.context.setdefault("tx_groups", set())
        if group in groups or self.w.ctl is None or self.w.ctl.closed:
            return
        groups.add(group)
        conn.context.setdefault("client", conn.peer)
        hb = encode_json({"clientID": conn.context["client"], "producerDataSet": [{"groupName": group}]})
        self.w.ctl.send_oneway(cc.ctl(Ctl.HEARTBEAT, hb, chan=conn.context["chan"], addr=conn.peer,
                                      language=cmd_language(conn), version=0))

    def _writer(self, topic: str, qid: int):
        """The store's writer of the queue, cached: the hot path is one cffi call. The record's
        origin is set per request; the worker's event loop is its only user, so sharing it is
        safe."""
        fw = self._writers.get((topic, qid))
        if fw is None:
            fw = self._writers[(topic, qid)] = self.w.pipeline.fast_writer(topic, qid)
        return fw

    def _prefix(self) -> str:
        if self._id_prefix is None:
            st = self.w.store
            self._id_prefix = host_prefix(st.store_host)
        return self._id_prefix

    def _answer(self, conn, cmd, res, msg_id: str, qid: int, qoff: int):
        ext = send_ext(msg_id, qid, qoff)
        if self.w.store.sync_wait:
            return self._answer_after_flush(conn, cmd, res.end, ext)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext)

    def _answer_after_flush(self, conn, cmd, end: int, ext) -> None:
        """Answered once everything below ``end`` is confirmed (on disk under SYNC_FLUSH, on a
        slave under SYNC_MASTER): the worker's Confirmer answers every send one group commit
        covers in one callback of the loop (None now: the answer is deferred)."""
        self._confirm().add(end, _answer_confirmed, (conn.defer(cmd), ext))

    # ------------------------------------------------------------------ others ----
    def send_back(self, conn, cmd: RemotingCommand):
        """CONSUMER_SEND_MSG_BACK: the retry copy (or dead letter) is retry.py's."""
        h = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext_fields)
        if not self.cfg.brokerPermission & PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.cfg.brokerIP1}] sending message is forbidden")
        code, remark = retry.answer_send_back(
            self.w.pipeline, h.offset, h.group, h.delayLevel, h.maxReconsumeTimes, cmd.version,
            group_retry_max_times=self.cfg.maxReconsumeTimes, origin_msg_id=h.originMsgId,
            origin_topic=h.originTopic)
        self.w.holds.appended()
        if code == 0:
            self.w.stats["put"] += 1
        return cmd.make_response(code, remark)

    def end_transaction(self, conn, cmd: RemotingCommand):
        """END_TRANSACTION (Java sends it oneway): commit re-puts the half message to its real
        topic, rollback only marks it resolved (shmq.store.transaction)."""
        h = EndTransactionRequestHeader.from_ext(cmd.ext_fields)
        if not self.cfg.brokerPermission & PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.cfg.brokerIP1}] sending message is forbidden")
        res = transaction.end_transaction(self.w.pipeline, h.commitLogOffset, h.tranStateTableOffset,
                                          h.producerGroup, h.commitOrRollback, wait_flush=False)
        self.w.holds.appended()
        if res is not None and res.committed:
            self.w.stats["put"] += 1
        return cmd.make_response()


def _answer_confirmed(arg, exc) -> None:
    later, ext = arg
    cmd = later.req
    if exc is None:
        later.answer(cmd.make_response(ResponseCode.SUCCESS, None, ext))
    elif isinstance(exc, FlushDiskTimeout):
        # Stored but not confirmed durable: RocketMQ answers 10 with the ids, clients report
        # FLUSH_DISK_TIMEOUT as a status rather than an error. A failed flush (the store is
        # read-only now) is answered so too, its remark saying so.
        remark = str(exc) if isinstance(exc, FlushFailed) else "flush disk timeout"
        later.answer(cmd.make_response(ResponseCode.FLUSH_DISK_TIMEOUT, remark, ext))
    else:
        # SYNC_MASTER: stored here, not confirmed by a slave: SLAVE_NOT_AVAILABLE (11) or
        # FLUSH_SLAVE_TIMEOUT (12), with the ids, as RocketMQ answers (a status, not an error)
        later.answer(cmd.make_response(exc.code, str(exc), ext))


def _fast_v2(e) -> SendMessageRequestHeader | None:
    """SendMessageRequestHeaderV2 read without the generic header machinery (the hot path).
    None when anything is missing or odd: the generic decoder then names the problem."""
    try:
        j, l_ = e.get("j"), e.get("l")
        return SendMessageRequestHeader(
            producerGroup=e["a"], topic=e["b"], defaultTopic=e["c"], defaultTopicQueueNums=int(e["d"]),
            queueId=int(e["e"]), sysFlag=int(e["f"]), bornTimestamp=int(e["g"]), flag=int(e["h"]),
            properties=e.get("i"), reconsumeTimes=int(j) if j is not None else None,
            unitMode=e.get("k", "").lower() == "true", batch=e.get("m", "").lower() == "true",
            maxReconsumeTimes=int(l_) if l_ is not None else None)
    except (KeyError, ValueError, TypeError):
        return None


def cmd_language(conn) -> str:
    return conn.context.get("language", "JAVA")


__all__ = ["Processor", "InvalidTopic"]
