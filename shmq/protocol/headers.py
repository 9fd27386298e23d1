"""Typed custom headers: the extFields of each request and response shmq handles.

Field names are RocketMQ's own (``common/protocol/header/**``), so a Struct's attribute is
the extFields key. Reading is liberal like Java's ``decodeCommandCustomHeader``: numbers
parse from decimal text (the wire always carries text after :mod:`command` decoded it),
booleans are ``Boolean.parseBoolean`` (``"true"`` in any case, anything else false),
unknown keys (``bname``, ``Signature``, ``AccessKey``, ``OnsChannel`` …) are ignored. A
missing field that Java marks ``@CFNotNull`` raises :class:`~shmq.errors.CommandFieldError`,
which servers answer SYSTEM_ERROR. Writing always gives strings and drops ``None``.

RocketMQ's ``SendMessageRequestHeaderV2`` is the send header with one-letter keys (codes 310
and 320, :data:`SEND_V2_LETTERS`); :func:`decode_send_header` reads either form into
:class:`SendMessageRequestHeader` and :func:`send_header_to_v2` writes the letters.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, ClassVar, TypeVar, Union, get_args, get_origin

import msgspec

from shmq.errors import CommandFieldError
from shmq.protocol.codes import FLAG_ONEWAY, RequestCode
from shmq.protocol.command import FRAME_PREFIX, header_template, json_text

_H = TypeVar("_H", bound="CommandHeader")

_INT, _BOOL, _STR = 0, 1, 2


def _kind(tp: Any) -> int:
    if get_origin(tp) is Union or type(tp).__name__ == "UnionType":
        tp = next(a for a in get_args(tp) if a is not type(None))
    return {int: _INT, bool: _BOOL, str: _STR}[tp]


class CommandHeader(msgspec.Struct, kw_only=True):
    """Base of every custom header. Subclasses only declare fields."""

    _spec: ClassVar[tuple[tuple[str, int, bool], ...]]

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls._spec = None  # type: ignore[assignment]  # built on first use, after msgspec finished the class

    @classmethod
    def _fields(cls) -> tuple[tuple[str, int, bool], ...]:
        spec = cls._spec
        if spec is None:
            spec = tuple((f.name, _kind(f.type), f.required) for f in msgspec.structs.fields(cls))
            cls._spec = spec
        return spec

    @classmethod
    def from_ext(cls: type[_H], ext: Mapping[str, str]) -> _H:
        """Read from a command's extFields (string values)."""
        kw: dict[str, Any] = {}
        for name, kind, required in cls._fields():
            raw = ext.get(name)
            if raw is None:
                if required:
                    raise CommandFieldError(name, "is null")
                continue
            if kind == _STR:
                kw[name] = raw
            elif kind == _INT:
                try:
                    kw[name] = int(raw)
                except (TypeError, ValueError):
                    raise CommandFieldError(name, "is not a number", value=raw) from None
            else:
                kw[name] = str(raw).lower() == "true"
        return cls(**kw)

    def to_ext(self) -> dict[str, str]:
        """As extFields: strings only, ``None`` left out."""
        out: dict[str, str] = {}
        for name, kind, _ in self._fields():
            v = getattr(self, name)
            if v is None:
                continue
            if kind == _BOOL:
                out[name] = "true" if v else "false"
            else:
                out[name] = str(v)
        return out


# ---- produce -------------------------------------------------------------------------------
class SendMessageRequestHeader(CommandHeader):
    producerGroup: str
    topic: str
    defaultTopic: str
    defaultTopicQueueNums: int
    queueId: int
    sysFlag: int
    bornTimestamp: int
    flag: int
    properties: str | None = None
    reconsumeTimes: int | None = None
    unitMode: bool = False
    batch: bool = False
    maxReconsumeTimes: int | None = None


#: SendMessageRequestHeaderV2's letters, in order a..n (``n`` is the 4.9.5+ broker name).
SEND_V2_LETTERS: dict[str, str] = {
    "a": "producerGroup", "b": "topic", "c": "defaultTopic", "d": "defaultTopicQueueNums",
    "e": "queueId", "f": "sysFlag", "g": "bornTimestamp", "h": "flag", "i": "properties",
    "j": "reconsumeTimes", "k": "unitMode", "l": "maxReconsumeTimes", "m": "batch", "n": "brokerName",
}
_SEND_V2_NAMES = {v: k for k, v in SEND_V2_LETTERS.items()}


def send_v2_ext(group: str, topic: str, default_topic: str, default_queue_nums: int, queue_id: int,
                sysflag: int, born_ms: int, flag: int, properties: str, batch: bool) -> dict[str, str]:
    """A producer's SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE extFields (letters as in SEND_V2_LETTERS;
    reconsumeTimes 0, unitMode false), as the strings Java sends: built directly, for the send
    path (send_header_to_v2's generic conversion cost 2 us a send)."""
    return {"a": group, "b": topic, "c": default_topic, "d": str(default_queue_nums), "e": str(queue_id),
            "f": str(sysflag), "g": str(born_ms), "h": str(flag), "i": properties, "j": "0", "k": "false",
            "m": "true" if batch else "false"}


#: Stand-ins a SendFrame's template is encoded with (numbers no send has, a text JSON escapes to
#: \u0000...), each replaced by its per-send slot (command.header_template).
_MARK_SYSFLAG, _MARK_BORN, _MARK_FLAG = -9100000000000000001, -9100000000000000002, -9100000000000000003
_MARK_PROPS = "\x00shmq-send-properties\x00"
_SLOTS = [(b"%d" % _MARK_SYSFLAG, b"%d"), (b"%d" % _MARK_BORN, b"%d"), (b"%d" % _MARK_FLAG, b"%d"),
          (json_text(_MARK_PROPS), b"%b")]
_SLOT_RE = re.compile(rb"%%|%[db]")  # read left to right: a "%d" in a topic is "%%d" there


def _pieces(template: bytes) -> tuple[bytes, ...]:
    out, cur, pos = [], [], 0
    for m in _SLOT_RE.finditer(template):
        cur.append(template[pos:m.start()])
        if m.group() == b"%%":
            cur.append(b"%")
        else:
            out.append(b"".join(cur))
            cur = []
        pos = m.end()
    cur.append(template[pos:])
    out.append(b"".join(cur))
    return tuple(out)


_PREFIX = FRAME_PREFIX  # not the imported name itself: see command.FRAME_PREFIX

#: The queue id a topic's base template is encoded with (SendFrame._base), replaced by each
#: queue's own: no queue has it, and it is digits after a sign, as JSON writes it unescaped.
_QID_MARK_TEXT = "-9100000000000000005"
_QID_MARK = _QID_MARK_TEXT.encode()
_BASES: dict = {}
_NO_BASE = object()


class SendFrame:
    """The whole SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE frame (JSON header, as the one encoder
    ``command.encode_command`` writes it) of one producer's sends to one queue, made per send by
    putting that send's values into slots of a template (``command.header_template``, over
    send_v2_ext's fields), so the layout is still defined once (byte-identical frames;
    tests/unit/test_send_frame.py). :meth:`frame` costs about a third of
    building a RemotingCommand and encoding it. ``of`` answers None when the stand-ins do not
    each occur exactly once (a group or topic holding one): the caller encodes generically."""

    __slots__ = ("template", "code", "pieces")

    def __init__(self, template: bytes, code: int):
        self.template, self.code = template, code
        #: the literal bytes around the five slots (``%%`` as ``%``), for a frame written in C
        #: (client/oneway.py)
        self.pieces = _pieces(template)

    @classmethod
    def of(cls, group: str, topic: str, default_topic: str, default_queue_nums: int, queue_id: int, *,
           batch: bool, oneway: bool) -> "SendFrame | None":
        """The template of sends to queue ``queue_id``: the topic's own template (``_base``: the
        encoder's output with a stand-in queue id, made once per topic and kind) with the id
        written in place of the stand-in, in the template and in the one piece holding it. The
        same bytes as encoding the queue's header afresh (a queue id is digits, the stand-in a
        JSON string of digits and a sign: nothing around it changes), at a few hundred ns a queue
        where the encoding cost ~40 µs: a producer's first plain send to a topic makes every
        queue's two templates (client/oneway.py ``_targets``), 16 for 8 queues, ~0.65 ms."""
        base = cls._base(group, topic, default_topic, default_queue_nums, batch, oneway)
        if base is None:
            return cls._made(group, topic, default_topic, default_queue_nums, str(queue_id), batch, oneway)
        frame, at = base
        qid = b"%d" % queue_id
        made = cls.__new__(cls)
        made.template, made.code = frame.template.replace(_QID_MARK, qid), frame.code
        p = frame.pieces
        made.pieces = p[:at] + (p[at].replace(_QID_MARK, qid),) + p[at + 1:]
        return made

    @classmethod
    def _base(cls, group: str, topic: str, default_topic: str, default_queue_nums: int, batch: bool,
              oneway: bool) -> "tuple[SendFrame, int] | None":
        """(the topic's template with the stand-in queue id, the index of the piece holding it),
        cached (bounded: cleared at 4,096 topics and kinds); None when the stand-in is not
        exactly once in the template and in one piece (a name holding it): ``of`` then encodes
        each queue's header itself."""
        key = (group, topic, default_topic, default_queue_nums, batch, oneway)
        got = _BASES.get(key, _NO_BASE)
        if got is not _NO_BASE:
            return got
        frame = cls._made(group, topic, default_topic, default_queue_nums, _QID_MARK_TEXT, batch, oneway)
        got = None
        if frame is not None and frame.template.count(_QID_MARK) == 1:
            at = [i for i, piece in enumerate(frame.pieces) if _QID_MARK in piece]
            if len(at) == 1 and frame.pieces[at[0]].count(_QID_MARK) == 1:
                got = (frame, at[0])
        if len(_BASES) >= 4096:
            _BASES.clear()
        _BASES[key] = got
        return got

    @classmethod
    def _made(cls, group: str, topic: str, default_topic: str, default_queue_nums: int, queue_id: str,
              batch: bool, oneway: bool) -> "SendFrame | None":
        """The template encoded afresh (the queue id as its text)."""
        ext = send_v2_ext(group, topic, default_topic, default_queue_nums, 0, _MARK_SYSFLAG, _MARK_BORN,
                          _MARK_FLAG, _MARK_PROPS, batch)
        ext["e"] = queue_id
        code = RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2
        made = header_template(code, ext, _SLOTS, FLAG_ONEWAY if oneway else 0)
        if made is None or made[1] != tuple(range(len(_SLOTS) + 1)):
            return None  # a slot's stand-in also elsewhere, or out of order: % would fill it wrongly
        return cls(made[0], code)

    def frame(self, sysflag: int, born_ms: int, flag: int, properties_json: bytes, body: bytes, opaque: int) -> bytes:
        """This send's frame. ``properties_json`` is the properties text as a JSON string
        (``command.json_text``); ValueError for a header over the 24-bit length, as encode_command."""
        head = self.template % (sysflag, born_ms, flag, properties_json, opaque)
        hl = len(head)
        if hl > 0xFFFFFF:
            raise ValueError(f"header of {hl} bytes does not fit the 24-bit header length")
        return b"".join((_PREFIX.pack(4 + hl + len(body), hl), head, body))


def decode_send_header(code: int, ext: Mapping[str, str]) -> SendMessageRequestHeader:
    """Read a send header of SEND_MESSAGE (long names) or SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE (letters)."""
    if code == RequestCode.SEND_MESSAGE:
        return SendMessageRequestHeader.from_ext(ext)
    return SendMessageRequestHeader.from_ext({SEND_V2_LETTERS.get(k, k): v for k, v in ext.items()})


def send_header_to_v2(header: SendMessageRequestHeader) -> dict[str, str]:
    """The one-letter extFields of SEND_MESSAGE_V2 for ``header``."""
    return {_SEND_V2_NAMES[k]: v for k, v in header.to_ext().items()}


class SendMessageResponseHeader(CommandHeader):
    msgId: str
    queueId: int
    queueOffset: int
    transactionId: str | None = None
    batchUniqId: str | None = None
    MSG_REGION: str | None = None
    TRACE_ON: str | None = None


class ConsumerSendMsgBackRequestHeader(CommandHeader):
    offset: int
    group: str
    delayLevel: int
    originMsgId: str | None = None
    originTopic: str | None = None
    unitMode: bool = False
    maxReconsumeTimes: int | None = None


class EndTransactionRequestHeader(CommandHeader):
    producerGroup: str
    tranStateTableOffset: int
    commitLogOffset: int
    commitOrRollback: int
    msgId: str
    fromTransactionCheck: bool = False
    transactionId: str | None = None


class CheckTransactionStateRequestHeader(CommandHeader):
    tranStateTableOffset: int
    commitLogOffset: int
    msgId: str | None = None
    transactionId: str | None = None
    offsetMsgId: str | None = None


class CreateTopicRequestHeader(CommandHeader):
    topic: str
    defaultTopic: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicFilterType: str
    topicSysFlag: int | None = None
    order: bool = False


# ---- consume -------------------------------------------------------------------------------
class PullMessageRequestHeader(CommandHeader):
    consumerGroup: str
    topic: str
    queueId: int
    queueOffset: int
    maxMsgNums: int
    sysFlag: int
    commitOffset: int
    suspendTimeoutMillis: int
    subVersion: int
    subscription: str | None = None
    expressionType: str | None = None


class PullMessageResponseHeader(CommandHeader):
    """All four always present: ali-ons stops a queue whose answer lacks one."""
    suggestWhichBrokerId: int
    nextBeginOffset: int
    minOffset: int
    maxOffset: int


class QueryConsumerOffsetRequestHeader(CommandHeader):
    consumerGroup: str
    topic: str
    queueId: int


class QueryConsumerOffsetResponseHeader(CommandHeader):
    offset: int | None = None


class UpdateConsumerOffsetRequestHeader(CommandHeader):
    consumerGroup: str
    topic: str
    queueId: int
    commitOffset: int


class GetMaxOffsetRequestHeader(CommandHeader):
    topic: str
    queueId: int


class GetMinOffsetRequestHeader(CommandHeader):
    topic: str
    queueId: int


class OffsetResponseHeader(CommandHeader):
    """Answer of GET_MAX_OFFSET, GET_MIN_OFFSET and SEARCH_OFFSET_BY_TIMESTAMP."""
    offset: int


class SearchOffsetRequestHeader(CommandHeader):
    topic: str
    queueId: int
    timestamp: int


class GetEarliestMsgStoretimeRequestHeader(CommandHeader):
    topic: str
    queueId: int


class GetEarliestMsgStoretimeResponseHeader(CommandHeader):
    timestamp: int


class ViewMessageRequestHeader(CommandHeader):
    offset: int


class QueryMessageRequestHeader(CommandHeader):
    topic: str
    key: str
    maxNum: int
    beginTimestamp: int
    endTimestamp: int


class QueryMessageResponseHeader(CommandHeader):
    indexLastUpdateTimestamp: int
    indexLastUpdatePhyoffset: int


class UnregisterClientRequestHeader(CommandHeader):
    clientID: str
    producerGroup: str | None = None
    consumerGroup: str | None = None


class GetConsumerListByGroupRequestHeader(CommandHeader):
    consumerGroup: str


class NotifyConsumerIdsChangedRequestHeader(CommandHeader):
    consumerGroup: str


# ---- NameServer ----------------------------------------------------------------------------
class RegisterBrokerRequestHeader(CommandHeader):
    brokerName: str
    brokerAddr: str
    clusterName: str
    haServerAddr: str
    brokerId: int
    compressed: bool = False
    bodyCrc32: int = 0


class RegisterBrokerResponseHeader(CommandHeader):
    haServerAddr: str | None = None
    masterAddr: str | None = None


class UnRegisterBrokerRequestHeader(CommandHeader):
    brokerName: str
    brokerAddr: str
    clusterName: str
    brokerId: int


class GetRouteInfoRequestHeader(CommandHeader):
    topic: str
    acceptStandardJsonOnly: bool | None = None


class PutKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str
    value: str


class GetKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


class GetKVConfigResponseHeader(CommandHeader):
    value: str | None = None


class DeleteKVConfigRequestHeader(CommandHeader):
    namespace: str
    key: str


class GetKVListByNamespaceRequestHeader(CommandHeader):
    namespace: str


class QueryDataVersionRequestHeader(CommandHeader):
    brokerName: str
    brokerAddr: str
    clusterName: str
    brokerId: int


class QueryDataVersionResponseHeader(CommandHeader):
    changed: bool


class WipeWritePermOfBrokerRequestHeader(CommandHeader):
    brokerName: str


class WipeWritePermOfBrokerResponseHeader(CommandHeader):
    wipeTopicCount: int


class AddWritePermOfBrokerRequestHeader(CommandHeader):
    brokerName: str


class AddWritePermOfBrokerResponseHeader(CommandHeader):
    addTopicCount: int


class DeleteTopicFromNamesrvRequestHeader(CommandHeader):
    topic: str
    clusterName: str | None = None


class GetTopicsByClusterRequestHeader(CommandHeader):
    cluster: str
