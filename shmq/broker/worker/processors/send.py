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
topic) or a flush wait becomes a coroutine.
"""
from __future__ import annotations

import asyncio
import random
import re
import socket
import struct

from shmq.errors import FlushDiskTimeout, InvalidTopic, ReplicationError
from shmq.protocol import RemotingCommand, RequestCode, ResponseCode
from shmq.protocol.bodies import TopicConfig, encode_json
from shmq.protocol.codes import Perm
from shmq.protocol.headers import (ConsumerSendMsgBackRequestHeader, EndTransactionRequestHeader,
                                   SendMessageRequestHeader, decode_send_header)
from shmq.protocol.message import decode_properties, encode_properties
from shmq.store import transaction, validate
from shmq.store.put import PutRequest

from shmq.broker.shared import control_channel as cc
from .. import retry
from shmq.broker.shared.control_channel import Ctl
from shmq.broker.shared.topics import RETRY_PREFIX
from ..confirm import Confirmer
from ..context import WorkerContext, born_host

_PERM_WRITE = int(Perm.WRITE)  # a plain int: an IntFlag '&' costs about a microsecond per request
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
        self.cluster_prop = f"CLUSTER\x01{self.cfg.brokerClusterName}"
        self._id_prefix: str | None = None
        self._writers: dict[tuple[str, int], object] = {}
        self._batch_props: dict[str, bytes] = {}
        self._confirmer: Confirmer | None = None  # SYNC_FLUSH / SYNC_MASTER waits, made on first use

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
        if not self.cfg.brokerPermission & _PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.cfg.brokerIP1}] sending message is forbidden")
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
        if not tc.perm & _PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] sending message is forbidden")
        if h.queueId >= max(tc.writeQueueNums, tc.readQueueNums):
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
        r = self._send_checked(conn, cmd, h, tc)
        return (await r) if asyncio.iscoroutine(r) else r

    def _send_checked(self, conn, cmd, h: SendMessageRequestHeader, tc: TopicConfig | None):
        bad = self._check_topic(cmd, h, tc)
        if bad is not None:
            return bad
        qid = h.queueId if h.queueId >= 0 else random.randrange(max(1, tc.writeQueueNums))
        if cmd.code == RequestCode.SEND_BATCH_MESSAGE or h.batch:
            return self._put_batch(conn, cmd, h, qid)
        props = h.properties or ""
        if "DELAY\x01" in props or "TRAN_MSG\x01" in props or h.topic.startswith(RETRY_PREFIX):
            # Delay (SCHEDULE_TOPIC_XXXX), half messages and retry -> DLQ are the put pipeline's.
            return self._put_pipeline(conn, cmd, h, qid, tc)
        if "WAIT\x01" in props:  # Java clients always send it; 4.9.x does not store it
            props = "\x02".join(p for p in props.split("\x02") if p and not p.startswith("WAIT\x01"))
        props = (props.rstrip("\x02") + "\x02" + self.cluster_prop) if props else self.cluster_prop
        store = self.w.store
        self.w.stats["put"] += 1
        if store.sync_wait:
            res = store.put(h.topic, qid, cmd.body, props.encode(), flag=h.flag, sysflag=h.sysFlag,
                            born_timestamp=h.bornTimestamp, born_host=born_host(conn),
                            reconsume_times=h.reconsumeTimes or 0, wait_flush=False)
            return self._answer(cmd, res, res.msg_id)
        qw = self._writer(h.topic, qid)
        m = qw._meta
        m.flag = h.flag
        m.sysflag = h.sysFlag
        m.born_ts = h.bornTimestamp
        m.born_ip, m.born_port = _born_ints(conn)
        m.reconsume_times = h.reconsumeTimes or 0
        qoff = qw.put(cmd.body, props.encode())
        return cmd.make_response(ResponseCode.SUCCESS, None, {
            "msgId": f"{self._prefix()}{qw._out.phys_offset:016X}", "queueId": str(qid), "queueOffset": str(qoff),
            "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})

    def _put_pipeline(self, conn, cmd, h: SendMessageRequestHeader, qid: int, tc: TopicConfig):
        req = PutRequest(
            topic=h.topic, body=cmd.body, properties=h.properties or b"", queue_id=qid, flag=h.flag,
            sysflag=h.sysFlag, born_timestamp=h.bornTimestamp, born_host=born_host(conn),
            reconsume_times=h.reconsumeTimes or 0,
            max_reconsume_times=retry.max_reconsume_times_of(cmd.version, h.maxReconsumeTimes,
                                                             self.cfg.maxReconsumeTimes),
            producer_group=h.producerGroup, write_queues=tc.writeQueueNums, read_queues=tc.readQueueNums)
        pr = self.w.pipeline.put(req, wait_flush=False)
        self.w.stats["put"] += 1
        if pr.half:
            self._register_tx_producer(conn, h.producerGroup)
        # RocketMQ answers the queue the send asked for and the offset where it was stored.
        return self._answer(cmd, pr.result, pr.msg_id, pr.request_queue_id, pr.queue_offset)

    def _put_batch(self, conn, cmd, h: SendMessageRequestHeader, qid: int):
        if h.topic.startswith(RETRY_PREFIX):
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, f"batch request does not support retry group {h.topic}")
        extra = self._batch_props.get(h.properties or "")
        if extra is None:
            pm = decode_properties(h.properties or "")
            if pm.get("TRAN_MSG", "").lower() == "true" or int(pm.get("DELAY", "0") or 0) > 0:
                return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL,
                                         "batch message does not support delay or transaction")
            pm.pop("WAIT", None)
            pm["CLUSTER"] = self.cfg.brokerClusterName
            extra = encode_properties(pm).encode()
            if len(self._batch_props) < 1024:  # producers repeat the same few batch-level texts
                self._batch_props[h.properties or ""] = extra
        store = self.w.store
        if store.sync_wait:
            res = store.put_batch(h.topic, qid, cmd.body, extra, sysflag=h.sysFlag,
                                  born_timestamp=h.bornTimestamp, born_host=born_host(conn), wait_flush=False)
        else:
            if len(cmd.body) > store.cfg.max_message_size:
                validate.check_sizes(len(cmd.body), 0, store.cfg.max_message_size)
            qw = self._writer(h.topic, qid)
            m = qw._meta
            m.flag = 0
            m.sysflag = h.sysFlag
            m.born_ts = h.bornTimestamp
            m.born_ip, m.born_port = _born_ints(conn)
            m.reconsume_times = 0
            first, count = qw.put_batch(cmd.body, extra)
            res = _Batch(h.topic, qid, first, count)
        self.w.stats["put"] += res.count
        prefix = self._prefix()
        ids = prefix + ("," + prefix).join(_batch_phys_hex(store, h.topic, qid, res))
        return self._answer(cmd, res, ids)

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
        """A cached QueueWriter: the hot path is one cffi call. Its record metadata (_meta) is
        set per request; the worker's event loop is its only user, so sharing it is safe."""
        qw = self._writers.get((topic, qid))
        if qw is None:
            qw = self._writers[(topic, qid)] = self.w.store.queue_writer(topic, qid)
        return qw

    def _prefix(self) -> str:
        if self._id_prefix is None:
            st = self.w.store
            self._id_prefix = st._store_ip.hex().upper() + f"{st._store_port & 0xFFFFFFFF:08X}"
        return self._id_prefix

    def _answer(self, cmd, res, msg_id: str, qid: int | None = None, qoff: int | None = None):
        ext = {"msgId": msg_id, "queueId": str(res.queue_id if qid is None else qid),
               "queueOffset": str(res.queue_offset if qoff is None else qoff),
               "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}
        if self.w.store.sync_wait:
            return self._answer_after_flush(cmd, res, ext)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext)

    async def _answer_after_flush(self, cmd, res, ext):
        if self._confirmer is None:
            self._confirmer = Confirmer(self.w.store)
        try:
            await self._confirmer.wait(res.end)
        except FlushDiskTimeout:
            # Stored but not confirmed durable: RocketMQ answers 10 with the ids, clients
            # report FLUSH_DISK_TIMEOUT as a status rather than an error.
            return cmd.make_response(ResponseCode.FLUSH_DISK_TIMEOUT, "flush disk timeout", ext)
        except ReplicationError as e:
            # SYNC_MASTER: stored here, not confirmed by a slave: SLAVE_NOT_AVAILABLE (11) or
            # FLUSH_SLAVE_TIMEOUT (12), with the ids, as RocketMQ answers (a status, not an error)
            return cmd.make_response(e.code, str(e), ext)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext)

    # ------------------------------------------------------------------ others ----
    def send_back(self, conn, cmd: RemotingCommand):
        """CONSUMER_SEND_MSG_BACK: the retry copy (or dead letter) is retry.py's."""
        h = ConsumerSendMsgBackRequestHeader.from_ext(cmd.ext_fields)
        if not self.cfg.brokerPermission & _PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.cfg.brokerIP1}] sending message is forbidden")
        code, remark = retry.answer_send_back(
            self.w.pipeline, h.offset, h.group, h.delayLevel, h.maxReconsumeTimes, cmd.version,
            group_retry_max_times=self.cfg.maxReconsumeTimes, origin_msg_id=h.originMsgId,
            origin_topic=h.originTopic)
        if code == 0:
            self.w.stats["put"] += 1
        return cmd.make_response(code, remark)

    def end_transaction(self, conn, cmd: RemotingCommand):
        """END_TRANSACTION (Java sends it oneway): commit re-puts the half message to its real
        topic, rollback only marks it resolved (shmq.store.transaction)."""
        h = EndTransactionRequestHeader.from_ext(cmd.ext_fields)
        if not self.cfg.brokerPermission & _PERM_WRITE:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.cfg.brokerIP1}] sending message is forbidden")
        res = transaction.end_transaction(self.w.pipeline, h.commitLogOffset, h.tranStateTableOffset,
                                          h.producerGroup, h.commitOrRollback, wait_flush=False)
        if res is not None and res.committed:
            self.w.stats["put"] += 1
        return cmd.make_response()


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


def _born_ints(conn) -> tuple[int, int]:
    bi = conn.context.get("born_int")
    if bi is None:
        ip, port = born_host(conn)
        bi = conn.context["born_int"] = (struct.unpack(">I", socket.inet_aton(ip))[0], port)
    return bi


class _Batch:
    """Where a batch went (what _batch_phys_hex and _answer need of a PutResult)."""
    __slots__ = ("topic", "queue_id", "queue_offset", "count")

    def __init__(self, topic: str, queue_id: int, queue_offset: int, count: int):
        self.topic, self.queue_id, self.queue_offset, self.count = topic, queue_id, queue_offset, count


_PHYS_HEX = re.compile(r"([0-9A-F]{16})[0-9A-F]{24}")


def _batch_phys_hex(store, topic: str, qid: int, res) -> list[str]:
    """Commit-log offsets of a batch's records as 16 hex digits each, read from its
    ConsumeQueue entries (20 bytes: offset i64, size i32, tag i64) without a Python loop."""
    cq = store.queues.get(topic, qid)
    fi, n = divmod(res.queue_offset, cq.per_file)
    if n + res.count <= cq.per_file:
        mm = cq.map(fi)
        if mm is not None:
            return _PHYS_HEX.findall(mm[n * 20:(n + res.count) * 20].hex().upper())
    # the batch spans two ConsumeQueue files
    return [f"{phys:016X}" for _, phys, _, _ in cq.entries(res.queue_offset, res.count)]


__all__ = ["Processor", "InvalidTopic"]
