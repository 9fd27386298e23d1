"""A producer's send over TCP once its message is prepared: the SEND_MESSAGE_V2 /
SEND_BATCH_MESSAGE request (:class:`RemoteSend`), and the waiter of an async one
(:class:`AsyncSend`), which turns the answer into the caller's SendResult or tries again.

The request is kept as its values, not as a RemotingCommand: its frame is made once its
connection gives it an opaque (the loop's ``Connection.start_frame`` / ``send_frames`` for async
and oneway sends, ``SyncRemotingClient.invoke`` for a sync one), by filling the slots
of the producer's template for that queue (``protocol.headers.SendFrame``: the one JSON encoder's
own output, so the bytes are the generic encoding's), a third of the cost of building and
encoding a command. A client that signs its requests (ACL's rpc_hook edits the command's fields)
gets the command (:meth:`RemoteSend.command`).
"""
from __future__ import annotations

import os
import time
from concurrent.futures import InvalidStateError

from shmq.errors import BrokerError, RemotingError
from shmq.message.names import TAGS, UNIQ_KEY
from shmq.message.properties import encode_properties
from shmq.native import _answer
from shmq.protocol import RemotingCommand, RequestCode, read_native, transport
from shmq.protocol.codes import FLAG_ONEWAY
from shmq.protocol.command import encode_command, json_text
from shmq.protocol.headers import SendFrame, send_v2_ext
from shmq.protocol.send_answer import answer_pieces

from .message import Message, MessageQueue, SendResult, SendStatus
from .send_future import SendFuture, callback_raised

# response codes after which RocketMQ's producer tries again (DefaultMQProducer.retryResponseCodes)
RETRY_CODES = {17, 14, 1, 16, 204, 205, 2}
STATUS_OF_CODE = {0: SendStatus.SEND_OK, 10: SendStatus.FLUSH_DISK_TIMEOUT,
                  11: SendStatus.SLAVE_NOT_AVAILABLE, 12: SendStatus.FLUSH_SLAVE_TIMEOUT}


class SendTarget:
    """What every send of one producer to one queue shares (batch or not, oneway or not): the
    request's fixed fields and the frame's template (None: the generic encoding)."""

    __slots__ = ("template", "group", "mq", "default_topic", "default_queue_nums", "batch", "oneway", "code")

    def __init__(self, group: str, mq: MessageQueue, default_topic: str, default_queue_nums: int, batch: bool,
                 oneway: bool):
        self.group, self.mq, self.default_topic, self.default_queue_nums = group, mq, default_topic, default_queue_nums
        self.batch, self.oneway = batch, oneway
        self.code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        self.template = SendFrame.of(group, mq.topic, default_topic, default_queue_nums, mq.queue_id, batch=batch,
                                     oneway=oneway)


class Frames:
    """A producer's SendTargets, one per (queue, batch, oneway), for the settings it sends with."""

    __slots__ = ("group", "_topic", "_nums", "_maps")

    def __init__(self, group: str):
        self.group = group
        self._topic, self._nums = None, None
        self._maps: tuple[dict, ...] = ({}, {}, {}, {})  # by (batch, oneway), each by queue

    def get(self, mq: MessageQueue, default_topic: str, default_queue_nums: int, batch: bool,
            oneway: bool) -> SendTarget:
        by_mq = self._maps[(2 if batch else 0) + (1 if oneway else 0)]
        t = by_mq.get(mq)
        if t is None or default_topic != self._topic or default_queue_nums != self._nums:
            if len(by_mq) >= 4096 or default_topic != self._topic or default_queue_nums != self._nums:
                for m in self._maps:  # many topics (a bounded cache, rebuilt as used), or new settings
                    m.clear()
                self._topic, self._nums = default_topic, default_queue_nums
            t = by_mq[mq] = SendTarget(self.group, mq, default_topic, default_queue_nums, batch, oneway)
        return t


class RemoteSend:
    """One prepared send's request: ``frame(opaque)`` its bytes, ``command()`` the same as a
    RemotingCommand (for an rpc_hook)."""

    __slots__ = ("target", "sysflag", "born_ms", "flag", "properties", "body")

    def __init__(self, target: SendTarget, sysflag: int, born_ms: int, flag: int, properties: str, body: bytes):
        self.target, self.sysflag, self.born_ms, self.flag, self.properties, self.body = (
            target, sysflag, born_ms, flag, properties, body)

    @property
    def code(self) -> int:
        return self.target.code

    @property
    def template(self) -> SendFrame | None:
        return self.target.template

    def command(self) -> RemotingCommand:
        t = self.target
        ext = send_v2_ext(t.group, t.mq.topic, t.default_topic, t.default_queue_nums, t.mq.queue_id, self.sysflag,
                          self.born_ms, self.flag, self.properties, t.batch)
        return RemotingCommand(code=t.code, ext_fields=ext, body=self.body, flag=FLAG_ONEWAY if t.oneway else 0)

    def frame(self, opaque: int) -> bytes:
        t = self.target.template
        if t is None:
            cmd = self.command()
            cmd.opaque = opaque
            return encode_command(cmd)
        return t.frame(self.sysflag, self.born_ms, self.flag, json_text(self.properties), self.body, opaque)


class AsyncSend(SendFuture):
    """One ``send_async`` / ``send_batch_async`` over TCP: the SendFuture its caller holds, and the
    waiter its connection completes (``Connection.start_frames``: ``done`` / ``set_result`` /
    ``set_exception`` with the broker's answer or the connection's error), one object, so a
    send in flight is one allocation the cyclic GC tracks, not two. ``set_result(answer)`` turns
    the answer into the caller's SendResult (``_resolve``: SendFuture's own ``set_result``);
    ``set_exception`` tries again on the same broker, as RocketMQ's async send does
    (retry_times_when_send_async_failed, each try with the whole timeout), after a connection
    error, a timeout or a response code in RETRY_CODES. No task or coroutine."""

    __slots__ = ("producer", "mq", "req", "uniq", "timeout", "left")

    def __init__(self, producer, callback, mq: MessageQueue, req: RemoteSend, uniq, timeout):
        SendFuture.__init__(self, callback)
        self.producer, self.mq, self.req, self.uniq, self.timeout = producer, mq, req, uniq, timeout
        self.left = producer.retry_times_async

    def submit(self) -> None:
        """(Again) to the broker's master address as the route has it now."""
        if self.req.__class__ is Message:  # sent through the lane (client/async_lane.py): its request
            self.req = self._request(self.req)
        inst = self.producer._inst()
        addr = inst.master_addr(self.mq.broker_name)
        if addr is None:
            self.set_exception(RemotingError(f"no address for broker {self.mq.broker_name}"))
        else:
            inst.submit_request(addr, self.req, self, self.timeout)

    def _request(self, msg: Message) -> RemoteSend:
        """The request of a plain send the lane framed: the queue's SendTarget, the properties as
        _wire makes them (TAGS, then the same UNIQ_KEY), a new born time as each of Java's tries
        takes."""
        p, tags = self.producer, msg.tags
        target = p._frames.get(self.mq, p.create_topic_key, p.default_queue_nums, False, False)
        props = {TAGS: tags, UNIQ_KEY: self.uniq} if tags else {UNIQ_KEY: self.uniq}
        return RemoteSend(target, 0, int(time.time() * 1000), msg.flag, encode_properties(props), msg.body)

    _resolve = SendFuture.set_result
    _fail = SendFuture.set_exception

    def set_result(self, resp) -> None:
        """The broker's answer (from the connection; the Python path of native/remote_answer.c)."""
        try:
            result = send_result(resp, self.mq, self.uniq)
        except Exception as e:  # noqa: BLE001 - a refusal, or an answer that does not parse
            self.set_exception(e)
            return
        try:
            self._resolve(result)
        except InvalidStateError:  # answered already (a second answer is dropped)
            pass

    def set_exception(self, e: BaseException) -> None:
        """The connection's error (closed, timed out) or a refusal: tried again, or the caller's."""
        retry = isinstance(e, RemotingError) or (isinstance(e, BrokerError) and e.code in RETRY_CODES)
        if retry and self.left > 0:
            self.left -= 1
            try:
                self.submit()
                return
            except Exception as e2:  # noqa: BLE001 - the producer was shut down meanwhile
                e = e2
        if not self.done():
            self._fail(e)


_answer.bind(AsyncSend, AsyncSend._resolve, SendResult, SendStatus.SEND_OK, InvalidStateError, callback_raised)
transport.use_pending_table(_answer.Pending)  # a client connection's requests in flight: the C table
transport.use_start_frame(_answer.start_frame)  # and its request frames queued in C (native/conn_queue.c)
_answer.bind_template(answer_pieces())  # this broker's SUCCESS answers are matched, not scanned
#: The client connection's fast path (RemotingClient(fast=...)): the SUCCESS answers to
#: AsyncSends matched, turned into SendResults (send_result's rules) and set, in C
#: (native/remote_answer.c); every other frame takes the Python path below. SHMQ_ANSWER_FAST=0
#: turns it off (the benchmarks' peer row).
answers = None if os.environ.get("SHMQ_ANSWER_FAST") == "0" else _answer.answers
read_native.use_reader(answers, _answer.Reader)  # connections with that hook read in C (protocol/read_native.py)


def send_result(resp, mq: MessageQueue, uniq) -> SendResult:
    """The SendResult of a send's answer (BrokerError for a refusal)."""
    status = STATUS_OF_CODE.get(resp.code)
    if status is None:
        raise BrokerError(resp.code, resp.remark)
    ext = resp.ext_fields
    qid = ext.get("queueId")
    if qid is not None and int(qid) != mq.queue_id:  # else the queue asked for, the common answer
        mq = MessageQueue(mq.topic, mq.broker_name, int(qid))
    msg_id = ext.get("msgId", "")
    offset = int(ext.get("queueOffset", -1))
    tx, handle = ext.get("transactionId"), ext.get("recallHandle")
    if tx is None and handle is None:
        return SendResult(status, uniq or msg_id, msg_id, mq, offset)
    return SendResult(status, uniq or msg_id, msg_id, mq, offset, transaction_id=tx, recall_handle=handle)
