"""PULL_MESSAGE (11): RocketMQ's ``PullMessageProcessor`` over the store's getMessage.

Every answer carries all four offsets (suggestWhichBrokerId, nextBeginOffset, minOffset,
maxOffset) and the store status as remark; codes follow §5.3:

==========================================  ====================================
store status                                code
==========================================  ====================================
FOUND                                       0 (body = the stored records)
NO_MATCHED_MESSAGE, MESSAGE_WAS_REMOVING    20 PULL_RETRY_IMMEDIATELY
NO_MESSAGE_IN_QUEUE, NO_MATCHED_LOGIC_QUEUE 19 if the offset asked is 0, else 21
OFFSET_FOUND_NULL, OFFSET_OVERFLOW_ONE      19 PULL_NOT_FOUND
OFFSET_OVERFLOW_BADLY, OFFSET_TOO_SMALL     21 PULL_OFFSET_MOVED
==========================================  ====================================

A 19 for a request with the suspend flag is held (pull_hold.py) up to its
suspendTimeoutMillis and re-run when the queue grows or the time is up; the re-run answers
whatever it finds. Filtering is by tag hash from the ConsumeQueue (clients filter again by
tag text); a SQL92 subscription (with enablePropertyFilter=true) is evaluated on each
record's properties (shmq.message.sql_filter). The subscription comes from the request (sysFlag 4) or from the group's
heartbeat (24 when there is none, 25 when it is older than the request's subVersion).

The common unfiltered pull of a queue this module has served in the handler's own call is then
taken by the worker's C path (pull_fast.py, ``learn``) before it is decoded; this module stays
the reference: the C path writes this module's answers (its template, its read, its holds).
"""
from __future__ import annotations

import asyncio
import operator
import os
import struct

from shmq.errors import FilterExpressionError
from shmq.message import sql_filter
from shmq.message.javahash import java_string_hash_cached
from shmq.message.names import PERM_READ
from shmq.protocol import FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, RequestCode, ResponseCode, SerializeType
from shmq.protocol.command import FRAME_PREFIX, header_template
from shmq.protocol.bodies import SubscriptionData
from shmq.protocol.headers import PullMessageRequestHeader
from shmq.protocol.transport import SCATTER_BODY as _FRAME_BODY_MAX  # larger: conn.send writes it uncopied
from shmq.store import GetStatus

from ..context import WorkerContext

FLAG_COMMIT_OFFSET = 1
FLAG_SUSPEND = 2
FLAG_SUBSCRIPTION = 4

#: RocketMQ's maxTransferCountOnMessageInMemory / maxTransferBytesOnMessageInMemory.
MAX_TRANSFER_COUNT = 32
MAX_TRANSFER_BYTES = 256 * 1024

_CODE = {
    GetStatus.FOUND: ResponseCode.SUCCESS,
    GetStatus.NO_MATCHED_MESSAGE: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.MESSAGE_WAS_REMOVING: ResponseCode.PULL_RETRY_IMMEDIATELY,
    GetStatus.OFFSET_FOUND_NULL: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_ONE: ResponseCode.PULL_NOT_FOUND,
    GetStatus.OFFSET_OVERFLOW_BADLY: ResponseCode.PULL_OFFSET_MOVED,
    GetStatus.OFFSET_TOO_SMALL: ResponseCode.PULL_OFFSET_MOVED,
}


def tag_codes_of(sub_string: str | None) -> set[int] | None:
    """FilterAPI.buildSubscriptionData: ``*`` or empty = every message (None), else the hash
    codes of the ``||``-separated, trimmed tags."""
    if sub_string is None:
        return None
    s = sub_string.strip()
    if not s or s == "*":
        return None
    codes = {java_string_hash_cached(t.strip()) for t in s.split("||") if t.strip()}
    return codes or None


class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker
        self.cfg = worker.cfg
        self._templates: dict[tuple[int, str, int], tuple[bytes, object] | None] = {}
        self._readers: dict[tuple[str, int], object] = {}  # QueueReader per queue pulled (read_raw)
        #: the worker's C path for the common pull (pull_fast.py), set by dispatch.build; it is
        #: told each unfiltered pull this path served synchronously (``learn``)
        self.fast = None

    def handlers(self):
        # LITE_PULL_MESSAGE (5.x DefaultLitePullConsumer) is answered exactly as PULL_MESSAGE
        return {RequestCode.PULL_MESSAGE: self.pull, RequestCode.LITE_PULL_MESSAGE: self.pull}

    def pull(self, conn, cmd: RemotingCommand):
        h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
        if not self.cfg.brokerPermission & PERM_READ:
            return cmd.make_response(ResponseCode.NO_PERMISSION,
                                     f"the broker[{self.cfg.brokerIP1}] pulling message is forbidden")
        tc = self.w.topics.get(h.topic)
        if tc is None:
            return self._pull_after_lookup(conn, cmd, h)
        return self._pull_topic(conn, cmd, h, tc, True)

    async def _pull_after_lookup(self, conn, cmd, h):
        tc = await self.w.fetch_topic(h.topic)
        if tc is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                     f"topic[{h.topic}] not exist, apply first please! "
                                     "See http://rocketmq.apache.org/docs/faq/ for further details.")
        return await _settled(self._pull_topic(conn, cmd, h, tc, False))

    def _pull_topic(self, conn, cmd, h: PullMessageRequestHeader, tc, now: bool):
        """``now``: served in the handler's own call, under ``tc`` as in the worker's table (what
        the C path may learn: a pull that waited for the supervisor is not learnt)."""
        if not tc.perm & PERM_READ:
            return cmd.make_response(ResponseCode.NO_PERMISSION, f"the topic[{h.topic}] pulling message is forbidden")
        if h.queueId < 0 or h.queueId >= tc.readQueueNums:
            return cmd.make_response(
                ResponseCode.SYSTEM_ERROR,
                f"queueId[{h.queueId}] is illegal, topic:[{h.topic}] topicConfig.readQueueNums:"
                f"[{tc.readQueueNums}] consumer:[{conn.peer}]")
        if h.sysFlag & FLAG_SUBSCRIPTION:
            return self._pull_expression(conn, cmd, h, h.expressionType, h.subscription, (tc, None) if now else None)
        sub = self.w.cached_subscription(h.consumerGroup, h.topic)
        if sub is None or _sub_version(sub) < h.subVersion:
            return self._pull_after_subscription(conn, cmd, h)
        return self._pull_expression(conn, cmd, h, sub.expressionType, sub.subString, (tc, sub) if now else None)

    def _pull_expression(self, conn, cmd, h, expression_type: str | None, text: str | None, learn=None):
        """``learn``: (the TopicConfig, the cached subscription or None: the request's) of a pull
        served now, for the C path (``_pull_filtered``)."""
        if (expression_type or "TAG").upper() == "TAG":
            return self._pull_filtered(conn, cmd, h, tag_codes_of(text), None, learn)
        if (expression_type or "").upper() != "SQL92" or not self.cfg.enablePropertyFilter:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     "The broker does not support consumer to filter message by SQL92")
        try:
            flt = sql_filter.compile_cached(text or "")
        except FilterExpressionError as e:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, f"parse the consumer's subscription failed: {e}")
        return self._pull_filtered(conn, cmd, h, None, flt.matches_record)

    async def _pull_after_subscription(self, conn, cmd, h):
        sub = await self.w.fetch_subscription(h.consumerGroup, h.topic)
        if sub is None:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_NOT_EXIST, "the consumer's subscription not exist")
        if _sub_version(sub) < h.subVersion:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_NOT_LATEST, "the consumer's subscription not latest")
        return await _settled(self._pull_expression(conn, cmd, h, sub.expressionType, sub.subString))

    def _pull_filtered(self, conn, cmd, h: PullMessageRequestHeader, codes: set[int] | None, rec_filter=None,
                       learn=None):
        suspend = h.sysFlag & FLAG_SUSPEND and h.suspendTimeoutMillis > 0
        # A consumer caught up asks for the queue's max offset: the read would answer
        # PULL_NOT_FOUND (OFFSET_OVERFLOW_ONE, or an empty or unknown queue at offset 0),
        # so a pull that may be held is parked without it.
        resp = None if suspend and self.w.holds.max_offset(h.topic, h.queueId) == h.queueOffset else \
            self._get(cmd, h, codes, rec_filter)
        committed = h.sysFlag & FLAG_COMMIT_OFFSET and h.commitOffset >= 0
        if committed:
            self.w.store.commit_offset(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        if learn is not None and codes is None and rec_filter is None and self.fast is not None:
            self.fast.learn(h, learn[0], learn[1], committed)
        if suspend and (resp is None or resp.code == ResponseCode.PULL_NOT_FOUND):
            return self._held(conn, cmd, h, codes, rec_filter)
        return resp

    def _held(self, conn, cmd, h: PullMessageRequestHeader, codes, rec_filter=None):
        """Park the pull (pull_hold.py). It is answered from the wake-up itself: the re-run
        read (the same filters as the first look) goes straight onto the connection, with no
        task, future or extra loop turn per held pull. Past ``max_inflight`` held pulls on one
        connection the rest wait as tasks the transport counts, so its read back-pressure
        bounds what one client can park."""
        timeout = min(h.suspendTimeoutMillis, self.cfg.longPollingMaxMillis) / 1000.0
        ctx = conn.context
        held = ctx.get(_HELD, 0)
        if held >= conn.limits.max_inflight:
            fut = asyncio.get_running_loop().create_future()

            def resolve(_grew: bool) -> None:
                if not fut.done():
                    fut.set_result(self._get(cmd, h, codes, rec_filter))
            self.w.holds.hold(h.topic, h.queueId, h.queueOffset, timeout, resolve, conn)
            return fut
        ctx[_HELD] = held + 1

        def answer(_grew: bool) -> None:
            ctx[_HELD] -= 1
            if not conn.closed and not cmd.flag & FLAG_ONEWAY:
                self._send_answer(conn, cmd, h, codes, rec_filter)
        self.w.holds.hold(h.topic, h.queueId, h.queueOffset, timeout, answer, conn)
        return None

    def _read(self, h: PullMessageRequestHeader, codes, rec_filter=None):
        store = self.w.store
        n = _max_count(h)
        try:
            return store.get_messages(h.topic, h.queueId, h.queueOffset, n, MAX_TRANSFER_BYTES, codes, rec_filter)
        except OSError:
            # The file under the read was just expired by the supervisor's cleanup (it raises
            # the minimum before unlinking): read again, which now answers OFFSET_TOO_SMALL.
            return store.get_messages(h.topic, h.queueId, h.queueOffset, n, MAX_TRANSFER_BYTES, codes, rec_filter)

    def _answer(self, h: PullMessageRequestHeader, codes, rec_filter=None):
        """What a pull is answered, decided in this one place for both encodings (``_get``,
        ``_send_answer``): (code, remark, suggestWhichBrokerId, nextBeginOffset, minOffset,
        maxOffset, body). An unfiltered read is one C call (``QueueReader.read_raw``) where it
        finds messages; get_messages decides every other case."""
        if codes is None and rec_filter is None and not self.cfg.slaveReadEnable:
            raw = self._read_raw(h)
            if raw is not None:
                body, n, nxt, mx, mn = raw
                self.w.stats["get"] += n
                return ResponseCode.SUCCESS, _FOUND, 0, nxt, mn, mx, body
        res = self._read(h, codes, rec_filter)
        st = res.status
        code = _CODE.get(st)
        if code is None:  # NO_MESSAGE_IN_QUEUE / NO_MATCHED_LOGIC_QUEUE
            code = ResponseCode.PULL_OFFSET_MOVED if h.queueOffset != 0 else ResponseCode.PULL_NOT_FOUND
        suggest = 0
        body = b""
        if code == ResponseCode.SUCCESS:
            msgs = res.messages
            if self.cfg.slaveReadEnable and self._consuming_slowly(msgs[-1]):
                suggest = 1  # subscriptionGroup whichBrokerWhenConsumeSlowly
            body = bytes(msgs[0]) if len(msgs) == 1 else b"".join(msgs)
            self.w.stats["get"] += len(msgs)
        return code, st.value, suggest, res.next_begin_offset, res.min_offset, res.max_offset, body

    def reader(self, topic: str, qid: int):
        """The queue's QueueReader (kept: a queue's slot never moves while the store is attached),
        None while the queue does not exist. The C path reads through the same one's state."""
        key = (topic, qid)
        reader = self._readers.get(key)
        if reader is None:
            reader = self.w.store.queue_reader(topic, qid)
            if reader is None:
                return None
            self._readers[key] = reader
        return reader

    def _read_raw(self, h: PullMessageRequestHeader):
        reader = self._readers.get((h.topic, h.queueId)) or self.reader(h.topic, h.queueId)
        if reader is None:
            return None
        return reader.read_raw(h.queueOffset, _max_count(h), MAX_TRANSFER_BYTES)

    def _get(self, cmd, h: PullMessageRequestHeader, codes, rec_filter=None) -> RemotingCommand:
        code, remark, suggest, nxt, mn, mx, body = self._answer(h, codes, rec_filter)
        return cmd.make_response(code, remark, _ext(suggest, nxt, mn, mx), body)

    def _send_answer(self, conn, cmd, h: PullMessageRequestHeader, codes, rec_filter=None) -> None:
        """A held pull's answer, written as a frame made from a header template
        (``_answer_template``): byte-identical to ``conn.send(self._get(...))``
        (tests/unit/test_pull_answer_frame.py) without the ext dict, RemotingCommand and JSON
        encoding per answer, which were a fifth of a one-message pull's Python."""
        self._write_answer(conn, cmd.opaque, cmd.serialize_type, h, codes, rec_filter)

    def answer_held(self, conn, topic: str, qid: int, offset: int, max_nums: int, opaque: int) -> None:
        """The answer of a pull the C path held (a JSON header, no filter) that its own read did
        not find (pull_fast.py): what ``_send_answer`` writes for it."""
        h = PullMessageRequestHeader(consumerGroup="", topic=topic, queueId=qid, queueOffset=offset,
                                     maxMsgNums=max_nums, sysFlag=0, commitOffset=0, suspendTimeoutMillis=0,
                                     subVersion=0)
        self._write_answer(conn, opaque, SerializeType.JSON, h, None)

    def found_pieces(self) -> tuple[bytes, ...]:
        """The FOUND answer's JSON header (``_answer_template``) cut at its four numbers,
        nextBeginOffset, minOffset, maxOffset and the opaque, in that order: what the C path
        writes its answers with (remoting_pull.c)."""
        template, order = _answer_template(ResponseCode.SUCCESS, _FOUND, 0)
        if order((0, 1, 2, 3)) != (0, 1, 2, 3) or b"%%" in template or template.count(b"%d") != 4:
            raise ValueError("the FOUND answer's template is not in nextBeginOffset, minOffset, maxOffset, opaque order")
        return tuple(template.split(b"%d"))

    def _write_answer(self, conn, opaque: int, serialize_type: int, h: PullMessageRequestHeader, codes,
                      rec_filter=None) -> None:
        code, remark, suggest, nxt, mn, mx, body = self._answer(h, codes, rec_filter)
        made = None
        if serialize_type == SerializeType.JSON and len(body) < _FRAME_BODY_MAX:
            key = (code, remark, suggest)
            made = self._templates.get(key)
            if made is None:
                made = self._templates[key] = _answer_template(code, remark, suggest)
        if made is None:  # a binary header, a body the transport writes uncopied, or no template
            conn.send(RemotingCommand(code=code, opaque=opaque, flag=FLAG_RESPONSE, remark=remark,
                                      ext_fields=_ext(suggest, nxt, mn, mx), body=body, serialize_type=serialize_type))
            return
        template, order = made
        head = template % order((nxt, mn, mx, opaque))
        hl = len(head)
        conn.write_frame(b"".join((_PREFIX.pack(4 + hl + len(body), hl), head, body)))

    def _consuming_slowly(self, last) -> bool:
        """RocketMQ's suggestPullingFromSlave: the bytes between the last record pulled and
        the log's end exceed accessMessageInMemoryMaxRatio percent of physical memory (they
        are likely no longer in the page cache: a slave serves them better). Only with
        slaveReadEnable; otherwise every answer suggests the master (0), as on 4.9.x."""
        (phys,) = _PHYS.unpack_from(last, 28)  # the record's PHYSICALOFFSET
        backlog = self.w.store.commit_pos - phys
        return backlog > _PHYS_MEMORY * self.cfg.accessMessageInMemoryMaxRatio // 100


async def _settled(r):
    """A handler's result inside a coroutine: an answer, None (a held pull answers itself
    later) or an awaitable of either."""
    return r if r is None or isinstance(r, RemotingCommand) else await r


_PREFIX = FRAME_PREFIX  # bound here: see command.FRAME_PREFIX
_FOUND = GetStatus.FOUND.value
_HELD = "pull.held"  # conn.context key: this connection's held pulls answered directly
_PHYS = struct.Struct(">q")
_PHYS_MEMORY = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _max_count(h: PullMessageRequestHeader) -> int:
    """The messages one pull may take: maxMsgNums within 1..MAX_TRANSFER_COUNT (both reads)."""
    n = h.maxMsgNums
    return 1 if n < 1 else MAX_TRANSFER_COUNT if n > MAX_TRANSFER_COUNT else n


def _ext(suggest: int, next_begin: int, min_offset: int, max_offset: int) -> dict[str, str]:
    """PullMessageResponseHeader as extFields, in the order both encodings write them."""
    return {"suggestWhichBrokerId": str(suggest), "nextBeginOffset": str(next_begin),
            "minOffset": str(min_offset), "maxOffset": str(max_offset)}


def _answer_template(code: int, remark: str, suggest: int):
    """The answer's JSON header as the one encoder writes it (``command.header_template``) with
    the three offsets and the opaque as %d slots: (template, getter ordering the values)."""
    marks = ("9100000000000000001", "9100000000000000002", "9100000000000000003")
    made = header_template(code, _ext(suggest, *map(int, marks)),
                           [(b'"%s"' % m.encode(), b'"%d"') for m in marks], FLAG_RESPONSE, remark)
    return None if made is None else (made[0], operator.itemgetter(*made[1]))


def _sub_version(sub: SubscriptionData) -> int:
    v = sub.subVersion
    return v if isinstance(v, int) else 0
