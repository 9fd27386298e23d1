"""The user-facing message types of the client (Message, SendResult, MessageExt, ...), converted
to wire form at the edge; a consumed record is decoded by shmq.message.record."""
from __future__ import annotations

import datetime
import enum
import re
import zlib
from dataclasses import dataclass
from typing import NamedTuple

from shmq.errors import InvalidMessage
from shmq.message.layout import FLAG_COMPRESSED, I32
from shmq.message.msgid import host_bytes, offset_msg_id
from shmq.message.names import DELAY, KEYS, RETRY_PREFIX, RETRY_TOPIC, TAGS, UNIQ_KEY
from shmq.message.properties import NAME_VALUE_SEP, decode_properties
from shmq.message.record import host_tuple, unpack_record
from shmq.native import ExtBase, MessageBase, SendResult, bind_ext, bind_message, bind_result, hot_records

_SEPARATORS = re.compile("[\x01\x02]")
COMPRESS_THRESHOLD = 4096  # compressMsgBodyOverHowmuch
COMPRESS_LEVEL = 5


class Message(MessageBase):
    """A message to send. ``keys`` may be a string ("k1 k2") or a list; ``properties`` are
    user properties (also what SQL92 filters see).

    A timer message (RocketMQ 5): ``deliver_at`` is when it becomes visible (a datetime, or
    epoch milliseconds as an int), ``delay`` how long from the broker's receipt (a timedelta,
    or seconds as a number); they become TIMER_DELIVER_MS / TIMER_DELAY_MS.

    ``Message(topic, body, tags=None, keys=None, properties=None, delay_level=0, flag=0, *,
    deliver_at=None, delay=None)``: the attributes and this __init__ are C (``MessageBase``,
    shmq/native/hot_message.c: a message is built per send); a body that is not bytes is
    converted with ``bytes(body)``, a str refused with TypeError; the properties are copied."""

    __slots__ = ()
    _FIELDS = ("topic", "body", "tags", "keys", "properties", "delay_level", "flag")

    def __getstate__(self):
        """Pickled and copied as the __slots__ class it was: (no dict, the attributes)."""
        return None, {k: getattr(self, k) for k in self._FIELDS if hasattr(self, k)}

    def key_list(self) -> list[str]:
        if not self.keys:
            return []
        if isinstance(self.keys, str):
            return [k for k in self.keys.split(" ") if k]
        return [str(k) for k in self.keys]

    def check_text(self) -> None:
        """Property names and values, tags and keys are written between the separators
        \x01 and \x02: one inside them would cut the properties text differently on the way
        back (and could forge a property), so it is refused, as an empty property name is."""
        for k, v in self.properties.items():
            if not k or not isinstance(k, str) or not isinstance(v, str):
                raise InvalidMessage(f"a property needs a non-empty name and a string value: {k!r}={v!r}")
            if _SEPARATORS.search(k) or _SEPARATORS.search(v):
                raise InvalidMessage(f"property {k!r} contains a \\x01 or \\x02 separator character")
        if self.tags is not None and (not isinstance(self.tags, str) or _SEPARATORS.search(self.tags)):
            raise InvalidMessage(f"tags must be a string without \\x01 or \\x02: {self.tags!r}")
        for k in self.key_list():
            if _SEPARATORS.search(k):
                raise InvalidMessage(f"key {k!r} contains a \\x01 or \\x02 separator character")

    def wire_properties(self) -> dict[str, str]:
        """Every property as it goes on the wire (user properties plus TAGS, KEYS, DELAY)."""
        props = dict(self.properties)
        if self.tags:
            props[TAGS] = self.tags
        keys = self.key_list()
        if keys:
            props[KEYS] = " ".join(keys)
        if self.delay_level:
            props[DELAY] = str(self.delay_level)
        return props

    def __repr__(self) -> str:
        return f"Message(topic={self.topic!r}, tags={self.tags!r}, keys={self.keys!r}, {len(self.body)} bytes)"


def _timer_properties(deliver_at, delay) -> dict[str, str]:
    if deliver_at is not None and delay is not None:
        raise ValueError("give deliver_at or delay, not both")
    if deliver_at is not None:
        if isinstance(deliver_at, datetime.datetime):
            if deliver_at.tzinfo is None:
                raise ValueError("deliver_at must be an aware datetime (with a tzinfo) or epoch milliseconds")
            ms = round(deliver_at.timestamp() * 1000)
        elif isinstance(deliver_at, int) and not isinstance(deliver_at, bool):
            ms = deliver_at
        else:
            raise TypeError("deliver_at must be a datetime or epoch milliseconds (int)")
        return {"TIMER_DELIVER_MS": str(ms)}
    if isinstance(delay, datetime.timedelta):
        ms = round(delay.total_seconds() * 1000)
    elif isinstance(delay, (int, float)) and not isinstance(delay, bool):
        ms = round(delay * 1000)
    else:
        raise TypeError("delay must be a timedelta or seconds (a number)")
    if ms < 0:
        raise ValueError(f"delay must not be negative: {delay!r}")
    return {"TIMER_DELAY_MS": str(ms)}


# The local send path (hot_send.c) takes exactly this class and builds the TAGS head with this key;
# Message(...) is constructed in C (hot_message.c), which calls _timer_properties for a timer.
bind_message(Message, (TAGS + NAME_VALUE_SEP).encode(), _timer_properties)


class SendStatus(str, enum.Enum):
    SEND_OK = "SEND_OK"
    FLUSH_DISK_TIMEOUT = "FLUSH_DISK_TIMEOUT"
    FLUSH_SLAVE_TIMEOUT = "FLUSH_SLAVE_TIMEOUT"
    SLAVE_NOT_AVAILABLE = "SLAVE_NOT_AVAILABLE"


class ConsumeResult(str, enum.Enum):
    SUCCESS = "CONSUME_SUCCESS"
    RECONSUME_LATER = "RECONSUME_LATER"
    # orderly listeners
    SUSPEND_CURRENT_QUEUE_A_MOMENT = "SUSPEND_CURRENT_QUEUE_A_MOMENT"


class LocalTransactionState(str, enum.Enum):
    COMMIT_MESSAGE = "COMMIT_MESSAGE"
    ROLLBACK_MESSAGE = "ROLLBACK_MESSAGE"
    UNKNOW = "UNKNOW"


class MessageQueue(NamedTuple):
    """A queue of a topic on a broker. A tuple: hashed and compared in C, as dict keys of
    every consumer's per-queue state are on the consume path."""
    topic: str
    broker_name: str
    queue_id: int


class _Pending:
    """The class of ``_LAZY``: a field not derived yet."""


_LAZY = _Pending()


class _Lazy:
    """A field formatted or parsed when first read: the hot paths (a local send, a consumed
    record) hand over the raw form they already have, and most callers never read it. The slot
    ``_<name>`` holds the value, or, while its class is ``kind``, the raw form that
    ``derive(obj, raw)`` turns into the value (stored back: derived once)."""

    __slots__ = ("kind", "derive", "load", "store")

    def __init__(self, kind: type, derive):
        self.kind = kind
        self.derive = derive

    def __set_name__(self, owner, name: str) -> None:
        slot = owner.__dict__["_" + name]  # the member descriptor of the slot
        self.load, self.store = slot.__get__, slot.__set__

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        v = self.load(obj)
        if v.__class__ is self.kind:
            v = self.derive(obj, v)
            self.store(obj, v)
        return v

    def __set__(self, obj, v) -> None:
        self.store(obj, v)


def _ids_text(raw: bytes) -> str:
    """32*n ASCII bytes of ids -> the comma-joined ids."""
    v = raw.decode()
    return ",".join(v[i:i + 32] for i in range(0, len(v), 32)) if len(v) > 32 else v


# SendResult is a C type (shmq/native/hot_result.c, which says what it keeps of the __slots__
# class it replaced): a local send builds it straight from the append's raw fields, and its
# msg_id and offset_msg_id are formatted, when first read, by _ids_text and msgid.offset_msg_id.
bind_result(SendStatus.SEND_OK, offset_msg_id, _ids_text)


@dataclass(frozen=True)
class MessageSelector:
    """A subscription expression: tags ("A || B", "*") or SQL92 over properties."""
    expression_type: str
    expression: str

    @classmethod
    def tags(cls, expression: str = "*") -> "MessageSelector":
        return cls("TAG", expression or "*")

    @classmethod
    def sql(cls, expression: str) -> "MessageSelector":
        return cls("SQL92", expression)


_EXT_FIELDS = ("topic", "body", "tags", "keys", "properties", "msg_id", "offset_msg_id", "queue_id", "queue_offset",
               "reconsume_times", "born_timestamp", "store_timestamp", "commit_log_offset", "sysflag", "flag",
               "broker_name", "born_host", "store_host")


#: MessageExt's numeric fields, C values of its base (ExtBase, shmq/native/hot_ext.c)
_EXT_NUMBERS = ("queue_id", "queue_offset", "reconsume_times", "born_timestamp", "store_timestamp",
                "commit_log_offset", "sysflag", "flag")


class MessageExt(ExtBase):
    """A consumed message. ``body`` is decompressed; ``raw`` is the stored record when it
    came through the local path (a memoryview into the mapping, valid while referenced).

    Decoded from a record, the properties are kept as the record's bytes and parsed when
    first read (tags, keys and msg_id come from them), and the offset msg id and the two
    hosts are formatted when first read: a listener that reads only the body pays for
    neither. The numeric fields (``_EXT_NUMBERS``) are C values of the base ``ExtBase``: an
    int object is made only when one is read (hot_ext.c says what else that changes)."""

    __slots__ = ("topic", "body", "_tags", "_keys", "_properties", "_msg_id", "_offset_msg_id", "broker_name",
                 "_born_host", "_store_host", "raw")

    def __init__(self, topic: str, body: bytes, tags: str | None, keys: list[str], properties: dict[str, str],
                 msg_id: str, offset_msg_id: str, queue_id: int, queue_offset: int, reconsume_times: int,
                 born_timestamp: int, store_timestamp: int, commit_log_offset: int, sysflag: int = 0,
                 flag: int = 0, broker_name: str = "", born_host: tuple = (), store_host: tuple = (),
                 raw: object = None):
        self.topic = topic
        self.body = body
        self._tags = tags
        self._keys = keys
        self._properties = properties
        self._msg_id = msg_id
        self._offset_msg_id = offset_msg_id
        self.queue_id = queue_id
        self.queue_offset = queue_offset
        self.reconsume_times = reconsume_times
        self.born_timestamp = born_timestamp
        self.store_timestamp = store_timestamp
        self.commit_log_offset = commit_log_offset
        self.sysflag = sysflag
        self.flag = flag
        self.broker_name = broker_name
        self._born_host = born_host
        self._store_host = store_host
        self.raw = raw

    # a decoded record hands over: properties as bytes, tags / keys / msg_id as _LAZY, the
    # offset msg id as None, the hosts as their 8 record bytes
    properties = _Lazy(bytes, lambda m, raw: decode_properties(raw))
    tags = _Lazy(_Pending, lambda m, _: m.properties.get(TAGS))
    keys = _Lazy(_Pending, lambda m, _: _split_keys(m.properties.get(KEYS)))
    msg_id = _Lazy(_Pending, lambda m, _: m.properties.get(UNIQ_KEY) or m.offset_msg_id)
    offset_msg_id = _Lazy(type(None), lambda m, _: offset_msg_id(_host_bytes(m, "_store_host"), m.commit_log_offset))
    born_host = _Lazy(bytes, lambda m, raw: host_tuple(raw))
    store_host = _Lazy(bytes, lambda m, raw: host_tuple(raw))

    @property
    def queue(self) -> MessageQueue:
        return MessageQueue(self.topic, self.broker_name, self.queue_id)

    def __getstate__(self):
        """Pickled and copied as the __slots__ class it was: the slots' state (and a subclass's
        own) with the C fields beside them."""
        state = object.__getstate__(self)
        d, slots = state if state.__class__ is tuple else (state, None)
        slots = dict(slots) if slots else {}
        for k in _EXT_NUMBERS:
            slots[k] = getattr(self, k)
        return d, slots

    def __eq__(self, other) -> bool:
        if not isinstance(other, MessageExt):
            return NotImplemented
        return all(getattr(self, f) == getattr(other, f) for f in _EXT_FIELDS)

    __hash__ = None

    def __repr__(self) -> str:
        return (f"MessageExt(topic={self.topic!r}, tags={self.tags!r}, keys={self.keys!r}, msg_id={self.msg_id!r}, "
                f"queue_id={self.queue_id}, queue_offset={self.queue_offset}, {len(self.body)} bytes)")


# The local consumer's record walk (shmq.native.hot_read, hot.c) builds MessageExt objects
# itself, filling the slots in __slots__ order as message_from_view does (properties as the
# record's bytes, hosts as their 8 bytes, the lazy fields pending) and the C fields of ExtBase.
bind_ext(MessageExt, tuple(MessageExt.__dict__[name] for name in MessageExt.__slots__), _LAZY)


def _split_keys(keys: str | None) -> list[str]:
    return [k for k in keys.split(" ") if k] if keys else []


def _host_bytes(m: "MessageExt", slot: str) -> bytes:
    """The 8 record bytes of a host, whether or not it was formatted already."""
    v = getattr(m, slot)
    if v.__class__ is bytes:
        return v
    return host_bytes(*v)


def message_from_view(mv, pos: int = 0, broker_name: str = "") -> MessageExt:
    """One record straight into a MessageExt (the consumer's hot path: one decode, properties
    left as bytes until read). A message of a retry topic shows its original topic (the
    RETRY_TOPIC property), as Java clients do. Raises StoreCorrupt on anything that is not a
    record."""
    (_, _, qid, flag, qoff, phys, sysflag, born_ts, born, store_ts, store, reconsume, _, body, topic,
     props) = unpack_record(mv, pos)
    body = bytes(body)
    if sysflag & FLAG_COMPRESSED:
        body = zlib.decompress(body)
    if topic.startswith(RETRY_PREFIX):
        props = decode_properties(props)
        topic = props.get(RETRY_TOPIC) or topic
    return MessageExt(topic, body, _LAZY, _LAZY, props, _LAZY, None, qid, qoff, reconsume, born_ts, store_ts, phys,
                      sysflag, flag, broker_name, born, store)


def messages_from_records(buf, broker_name: str = "", topic: str | None = None):
    """Decode a pull response body (a run of records). With the queue's ``topic`` (not a retry
    topic, whose messages show their original one) the whole body is decoded in one C call
    (``hot_records``, the local walk's decode) unless a record needs this path."""
    if topic is not None and not topic.startswith(RETRY_PREFIX):
        msgs = hot_records(buf, topic, broker_name)
        if msgs is not None:
            return msgs
    mv = memoryview(buf)
    pos = 0
    out = []
    n = len(mv)
    while pos < n:
        out.append(message_from_view(mv, pos, broker_name))
        pos += I32.unpack_from(mv, pos)[0]
    return out


__all__ = ["Message", "MessageExt", "SendResult", "SendStatus", "ConsumeResult", "MessageQueue",
           "MessageSelector", "LocalTransactionState", "message_from_view", "messages_from_records",
           "decode_properties"]
