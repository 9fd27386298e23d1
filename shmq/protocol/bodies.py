"""JSON bodies: route data, cluster info, broker registration, heartbeat, locks, lists.

Java writes these with fastjson (``RemotingSerializable``): fields sorted by name, nulls
left out, non-ASCII written raw, and ``Map<Long,String>`` keys *unquoted* —
``{"brokerAddrs":{0:"127.0.0.1:10911"}}``. That is not JSON, yet it is what every client
older than 4.9.4 is used to (ali-ons parses it with an ``eval``-based parser, C++ with
jsoncpp's numeric keys, Go with its own key reader). From V4_9_4 on, or when a request says
``acceptStandardJsonOnly=true``, the NameServer quotes the keys and escapes non-ASCII as
``\\uXXXX`` (fastjson's BrowserCompatible). :func:`encode_topic_route` does both;
:func:`decode_json` reads either.

Readers are liberal: unknown keys are ignored, QueueData's pre-4.9.0 ``topicSynFlag`` is
read as ``topicSysFlag``, heartbeat enums come as names or ordinals.
"""
from __future__ import annotations

import re
import struct
import zlib
from typing import Any, TypeVar

import msgspec

from shmq.errors import BodyDecodeError

T = TypeVar("T")

_sorted_encoder = msgspec.json.Encoder(order="sorted")


# ---- reading ----------------------------------------------------------------------------
# A JSON string literal, or an object key that is a bare integer (group 1 = what precedes it).
_BARE_KEY = re.compile(rb'"(?:[^"\\]|\\.)*"|([{,]\s*)(-?\d+)(\s*:)', re.S)


def quote_bare_keys(data: bytes) -> bytes:
    """Turn fastjson's ``{0:"a"}`` into ``{"0":"a"}``; string literals are left untouched."""
    def fix(m: re.Match[bytes]) -> bytes:
        if m.group(1) is None:
            return m.group(0)
        return m.group(1) + b'"' + m.group(2) + b'"' + m.group(3)

    return _BARE_KEY.sub(fix, data)


def decode_json(data: bytes | str, type: type[T], what: str | None = None) -> T:
    """Decode a body as fastjson may have written it (bare integer keys allowed)."""
    if isinstance(data, str):
        data = data.encode()
    name = what or getattr(type, "__name__", str(type))
    try:
        return msgspec.json.decode(data, type=type)
    except msgspec.ValidationError as e:  # well-formed JSON of the wrong shape: no retry
        raise BodyDecodeError(name, str(e)) from None
    except msgspec.DecodeError:
        pass
    try:
        return msgspec.json.decode(quote_bare_keys(bytes(data)), type=type)
    except msgspec.DecodeError as e:  # ValidationError included
        raise BodyDecodeError(name, str(e)) from None


def encode_json(obj: Any) -> bytes:
    """Standard JSON with keys and fields sorted, as fastjson orders them (string keys only)."""
    return _sorted_encoder.encode(obj)


# ---- writing fastjson's way ------------------------------------------------------------------
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
# fastjson's default writer escapes quote, backslash and control characters; BrowserCompatible
# adds "/" and everything from DEL (127) up, as \uXXXX per UTF-16 unit with upper-case digits.
_DEFAULT_SPECIAL = re.compile('["\\\\\x00-\x1f]')
_BROWSER_SPECIAL = re.compile('["\\\\/\x00-\x1f\x7f-\U0010ffff]')


def _escape(m: re.Match[str]) -> str:
    ch = m.group(0)
    short = _SHORT_ESCAPES.get(ch)
    if short is not None:
        return short
    code = ord(ch)
    if code > 0xFFFF:  # Java strings are UTF-16: a surrogate pair, each unit escaped
        code -= 0x10000
        return f"\\u{0xD800 + (code >> 10):04X}\\u{0xDC00 + (code & 0x3FF):04X}"
    return f"\\u{code:04X}"


def _fj_str(s: str, standard: bool) -> str:
    return '"' + (_BROWSER_SPECIAL if standard else _DEFAULT_SPECIAL).sub(_escape, s) + '"'


def _fastjson(obj: Any, standard: bool, out: list[str]) -> None:
    if isinstance(obj, msgspec.Struct):
        obj = {f: getattr(obj, f) for f in obj.__struct_fields__}
        obj = {k: v for k, v in obj.items() if v is not None}
    if isinstance(obj, dict):
        out.append("{")
        first = True
        for k in sorted(obj, key=lambda k: (isinstance(k, str), k)):
            v = obj[k]
            if not first:
                out.append(",")
            first = False
            if isinstance(k, int) and not standard:
                out.append(str(k))
            else:
                out.append(_fj_str(str(k), standard))
            out.append(":")
            _fastjson(v, standard, out)
        out.append("}")
    elif isinstance(obj, (list, tuple, set, frozenset)):
        out.append("[")
        items = sorted(obj) if isinstance(obj, (set, frozenset)) else obj
        for i, v in enumerate(items):
            if i:
                out.append(",")
            _fastjson(v, standard, out)
        out.append("]")
    elif isinstance(obj, str):
        out.append(_fj_str(obj, standard))
    elif obj is True:
        out.append("true")
    elif obj is False:
        out.append("false")
    elif obj is None:
        out.append("null")
    else:
        out.append(str(obj))


def fastjson_dumps(obj: Any, *, standard: bool = False) -> bytes:
    """Serialise like ``RemotingSerializable.encode``: sorted fields, no nulls, bare Long keys.

    ``standard=True`` is the V4_9_4+ form: quoted keys, non-ASCII escaped."""
    out: list[str] = []
    _fastjson(obj, standard, out)
    text = "".join(out)
    return text.encode("ascii" if standard else "utf-8")


# ---- route data (common/protocol/route/*.java) ------------------------------------------------
class QueueData(msgspec.Struct, kw_only=True):
    brokerName: str
    readQueueNums: int
    writeQueueNums: int
    perm: int
    topicSysFlag: int = 0
    # Before 4.9.0 the field was misspelt; read it, never write it.
    topicSynFlag: int | None = None

    def __post_init__(self) -> None:
        if self.topicSynFlag is not None:
            if not self.topicSysFlag:
                self.topicSysFlag = self.topicSynFlag
            self.topicSynFlag = None


class BrokerData(msgspec.Struct, kw_only=True):
    cluster: str
    brokerName: str
    brokerAddrs: dict[int, str] = msgspec.field(default_factory=dict)


class TopicRouteData(msgspec.Struct, kw_only=True):
    orderTopicConf: str | None = None
    queueDatas: list[QueueData] = msgspec.field(default_factory=list)
    brokerDatas: list[BrokerData] = msgspec.field(default_factory=list)
    filterServerTable: dict[str, list[str]] = msgspec.field(default_factory=dict)


def encode_topic_route(route: TopicRouteData, *, standard_json: bool = False) -> bytes:
    """The GET_ROUTEINFO_BY_TOPIC body: bare broker-id keys unless ``standard_json``.

    The NameServer passes ``standard_json = request.version >= V4_9_4 or acceptStandardJsonOnly``."""
    return fastjson_dumps(route, standard=standard_json)


def decode_topic_route(data: bytes) -> TopicRouteData:
    return decode_json(data, TopicRouteData)


class ClusterInfo(msgspec.Struct, kw_only=True):
    brokerAddrTable: dict[str, BrokerData] = msgspec.field(default_factory=dict)
    clusterAddrTable: dict[str, list[str]] = msgspec.field(default_factory=dict)


def encode_cluster_info(info: ClusterInfo) -> bytes:
    """GET_BROKER_CLUSTER_INFO's body: Java always writes it the non-standard way."""
    return fastjson_dumps(info)


class TopicList(msgspec.Struct, kw_only=True, omit_defaults=True):
    # fastjson leaves out a null field: no "brokerAddr" unless it is set (the list is required,
    # so an empty one is still written)
    topicList: list[str]
    brokerAddr: str | None = None


class KVTable(msgspec.Struct, kw_only=True):
    table: dict[str, str] = msgspec.field(default_factory=dict)


# ---- broker registration (common/protocol/body/RegisterBrokerBody.java) ------------------------
class DataVersion(msgspec.Struct, kw_only=True, frozen=True):
    """A broker's topic-config version; equality is what QUERY_DATA_VERSION compares."""
    timestamp: int = 0
    counter: int = 0


class TopicConfig(msgspec.Struct, kw_only=True):
    topicName: str
    readQueueNums: int = 16
    writeQueueNums: int = 16
    perm: int = 6
    topicFilterType: str = "SINGLE_TAG"
    topicSysFlag: int = 0
    order: bool = False


class TopicConfigSerializeWrapper(msgspec.Struct, kw_only=True):
    topicConfigTable: dict[str, TopicConfig] = msgspec.field(default_factory=dict)
    dataVersion: DataVersion = msgspec.field(default_factory=DataVersion)


class RegisterBrokerBody(msgspec.Struct, kw_only=True):
    topicConfigSerializeWrapper: TopicConfigSerializeWrapper = msgspec.field(
        default_factory=TopicConfigSerializeWrapper
    )
    filterServerList: list[str] = msgspec.field(default_factory=list)


_I32 = struct.Struct(">i")
#: A broker has at most a few thousand topics; a count or length beyond this is garbage, and
#: refusing it keeps a hostile body from making us allocate (zlib output is bounded too).
_MAX_REGISTER_INFLATED = 64 * 1024 * 1024


def encode_register_body(body: RegisterBrokerBody, *, compressed: bool = False) -> bytes:
    """REGISTER_BROKER's body, plain JSON or RocketMQ's compressed form.

    Compressed form: a zlib (deflate) stream of

    ==========================  =========================================================
    i32 + bytes                 DataVersion JSON
    i32                         topic count
    (i32 + bytes) × count       each TopicConfig as text ``name read write perm filterType``
    i32 + bytes                 filterServerList JSON
    ==========================  =========================================================

    (topicSysFlag and order do not travel in this form; RocketMQ drops them too.)
    """
    w = body.topicConfigSerializeWrapper
    if not compressed:
        return encode_json(body)
    parts: list[bytes] = []

    def put(b: bytes) -> None:
        parts.append(_I32.pack(len(b)))
        parts.append(b)

    put(encode_json(w.dataVersion))
    parts.append(_I32.pack(len(w.topicConfigTable)))
    for tc in w.topicConfigTable.values():
        put(f"{tc.topicName} {tc.readQueueNums} {tc.writeQueueNums} {tc.perm} {tc.topicFilterType}".encode())
    put(encode_json(body.filterServerList))
    return zlib.compress(b"".join(parts), 9)


def decode_register_body(data: bytes, *, compressed: bool) -> RegisterBrokerBody:
    if not compressed:
        return decode_json(data, RegisterBrokerBody)
    try:
        d = zlib.decompressobj()
        raw = d.decompress(data, _MAX_REGISTER_INFLATED)
        if d.unconsumed_tail:
            raise BodyDecodeError("RegisterBrokerBody", f"inflates beyond {_MAX_REGISTER_INFLATED} bytes")
    except zlib.error as e:
        raise BodyDecodeError("RegisterBrokerBody", f"bad deflate stream: {e}") from None
    pos = 0

    def take_int() -> int:
        nonlocal pos
        if pos + 4 > len(raw):
            raise BodyDecodeError("RegisterBrokerBody", "end of compressed data reached")
        (v,) = _I32.unpack_from(raw, pos)
        pos += 4
        return v

    def take_bytes() -> bytes:
        nonlocal pos
        n = take_int()
        if n < 0 or pos + n > len(raw):
            raise BodyDecodeError("RegisterBrokerBody", f"part length {n} runs past the data")
        b = raw[pos : pos + n]
        pos += n
        return b

    version = decode_json(take_bytes(), DataVersion)
    count = take_int()
    if count < 0:
        raise BodyDecodeError("RegisterBrokerBody", f"negative topic count {count}")
    table: dict[str, TopicConfig] = {}
    for _ in range(count):
        fields = take_bytes().decode(errors="replace").split(" ")
        if len(fields) != 5:
            # Java's TopicConfig.decode leaves such an entry blank; skip it rather than guess.
            continue
        name, read, write, perm, ftype = fields
        try:
            table[name] = TopicConfig(
                topicName=name, readQueueNums=int(read), writeQueueNums=int(write),
                perm=int(perm), topicFilterType=ftype,
            )
        except ValueError:
            raise BodyDecodeError("RegisterBrokerBody", f"bad topic config {fields!r}") from None
    filters = decode_json(take_bytes(), list[str] | None) or []
    return RegisterBrokerBody(
        topicConfigSerializeWrapper=TopicConfigSerializeWrapper(topicConfigTable=table, dataVersion=version),
        filterServerList=filters,
    )


# ---- heartbeat (common/protocol/heartbeat/*.java) ---------------------------------------------
CONSUME_TYPES = ("CONSUME_ACTIVELY", "CONSUME_PASSIVELY")
MESSAGE_MODELS = ("BROADCASTING", "CLUSTERING")
CONSUME_FROM_WHERE = (
    "CONSUME_FROM_LAST_OFFSET",
    "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST",
    "CONSUME_FROM_MIN_OFFSET",
    "CONSUME_FROM_MAX_OFFSET",
    "CONSUME_FROM_FIRST_OFFSET",
    "CONSUME_FROM_TIMESTAMP",
)


def _enum_name(value: str | int, names: tuple[str, ...], what: str) -> str:
    if isinstance(value, int):
        if 0 <= value < len(names):
            return names[value]
        raise ValueError(f"{what} ordinal {value} out of range")
    if value.isdigit() and int(value) < len(names):
        return names[int(value)]
    return value


class SubscriptionData(msgspec.Struct, kw_only=True):
    topic: str
    subString: str = "*"
    classFilterMode: bool = False
    tagsSet: list[str] = msgspec.field(default_factory=list)
    # Never trusted by the broker (old C++ sends [0,0]); kept for the record.
    codeSet: list[int] = msgspec.field(default_factory=list)
    subVersion: int | str = 0
    expressionType: str | None = "TAG"

    def __post_init__(self) -> None:
        if isinstance(self.subVersion, str):
            self.subVersion = int(self.subVersion) if self.subVersion.strip().lstrip("-").isdigit() else 0


class ConsumerData(msgspec.Struct, kw_only=True):
    groupName: str
    consumeType: str | int = "CONSUME_PASSIVELY"
    messageModel: str | int = "CLUSTERING"
    consumeFromWhere: str | int = "CONSUME_FROM_LAST_OFFSET"
    subscriptionDataSet: list[SubscriptionData] = msgspec.field(default_factory=list)
    unitMode: bool = False

    def __post_init__(self) -> None:
        self.consumeType = _enum_name(self.consumeType, CONSUME_TYPES, "consumeType")
        self.messageModel = _enum_name(self.messageModel, MESSAGE_MODELS, "messageModel")
        self.consumeFromWhere = _enum_name(self.consumeFromWhere, CONSUME_FROM_WHERE, "consumeFromWhere")


class ProducerData(msgspec.Struct, kw_only=True):
    groupName: str


class HeartbeatData(msgspec.Struct, kw_only=True):
    clientID: str
    producerDataSet: list[ProducerData] = msgspec.field(default_factory=list)
    consumerDataSet: list[ConsumerData] = msgspec.field(default_factory=list)


def decode_heartbeat(data: bytes) -> HeartbeatData:
    return decode_json(data, HeartbeatData)


# ---- consumer list and queue locks --------------------------------------------------------------
class ConsumerListBody(msgspec.Struct, kw_only=True):
    consumerIdList: list[str] = msgspec.field(default_factory=list)


class MessageQueue(msgspec.Struct, kw_only=True, frozen=True):
    topic: str
    brokerName: str
    queueId: int


class LockBatchRequestBody(msgspec.Struct, kw_only=True):
    consumerGroup: str
    clientId: str
    mqSet: list[MessageQueue] = msgspec.field(default_factory=list)


class LockBatchResponseBody(msgspec.Struct, kw_only=True):
    lockOKMQSet: list[MessageQueue] = msgspec.field(default_factory=list)


#: UNLOCK_BATCH_MQ's body has the same shape as the lock request.
UnlockBatchRequestBody = LockBatchRequestBody


# ---- offset reset (common/protocol/body/ResetOffsetBody.java) ----------------------------------
_MQ_KEY = re.compile(r'\{"brokerName":"((?:[^"\\]|\\.)*)","queueId":(-?\d+),"topic":"((?:[^"\\]|\\.)*)"\}:(-?\d+)')


def encode_reset_offset_body(table: dict[tuple[str, str, int], int]) -> bytes:
    """ResetOffsetBody as fastjson writes it: the map's keys are MessageQueue objects, written as
    JSON objects in key position (not JSON, but what Java clients parse). ``table`` maps
    (topic, brokerName, queueId) to the offset."""
    parts = [f'{{"brokerName":{_fj_str(b, False)},"queueId":{q},"topic":{_fj_str(t, False)}}}:{o}'
             for (t, b, q), o in sorted(table.items())]
    return ('{"offsetTable":{' + ",".join(parts) + "}}").encode()


def decode_reset_offset_body(data: bytes) -> dict[tuple[str, str, int], int]:
    text = data.decode("utf-8", "replace")
    return {(m.group(3), m.group(1), int(m.group(2))): int(m.group(4)) for m in _MQ_KEY.finditer(text)}
