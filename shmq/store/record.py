"""The message record codec: RocketMQ's CommitLog layout, which is also the body of a pull,
query and view response. The layout table lives in ``shmq/native/layout.h``; the offsets
used here are checked against it by tests/layout.

The C append writes records; this module decodes them (zero-copy where it can), encodes
them in pure Python for tests and tools, and handles the properties text and message ids.
"""
from __future__ import annotations

import socket
import struct
import zlib
from dataclasses import dataclass, field

from shmq.errors import StoreCorrupt

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
RECORD_FIXED = 91  # TOTALSIZE = 91 + body + topic + properties (IPv4 hosts)
BLANK_MIN = 8

# offsets of the fixed part, as in layout.h (SHMQ_R_*)
R_TOTALSIZE, R_MAGIC, R_BODYCRC, R_QUEUEID, R_FLAG = 0, 4, 8, 12, 16
R_QUEUEOFFSET, R_PHYSOFFSET, R_SYSFLAG, R_BORNTS, R_BORNHOST = 20, 28, 36, 40, 48
R_STORETS, R_STOREHOST, R_RECONSUME, R_PREPARED, R_BODYLEN = 56, 64, 72, 76, 84

# TOTALSIZE MAGIC BODYCRC QUEUEID FLAG QUEUEOFFSET PHYSOFFSET SYSFLAG BORNTS BORNHOST(ip,port)
# STORETS STOREHOST(ip,port) RECONSUME PREPARED BODYLEN
HEADER = struct.Struct(">iIIiiqqiq4siq4siiqi")
assert HEADER.size == 88

# sysFlag bits (MessageSysFlag)
FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TX_TYPE_MASK = 0xC
TX_NOT_TYPE = 0x0
TX_PREPARED_TYPE = 0x4
TX_COMMIT_TYPE = 0x8
TX_ROLLBACK_TYPE = 0xC
TX_MASK_NO_CQ = (TX_PREPARED_TYPE, TX_ROLLBACK_TYPE)  # stored with queue offset 0, no CQ entry
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20
FLAG_INNER_BATCH = 0x80

NAME_VALUE_SEP = "\x01"
PROPERTY_SEP = "\x02"


def body_crc(body) -> int:
    """BODYCRC: CRC-32 (zlib polynomial) of the stored body, top bit cleared (UtilAll.crc32)."""
    return zlib.crc32(body) & 0x7FFFFFFF


# ---- properties ----------------------------------------------------------------------
def encode_properties(props: dict[str, str] | None) -> bytes:
    """name\\1value\\2name\\1value, no trailing \\2 (as Java writes it)."""
    if not props:
        return b""
    return PROPERTY_SEP.join(f"{k}{NAME_VALUE_SEP}{v}" for k, v in props.items()).encode()


def decode_properties(raw) -> dict[str, str]:
    """Liberal: tolerates a trailing \\2 (ali-ons, C++) and drops pairs with an empty name or
    value, as Java's MessageDecoder.string2messageProperties does."""
    if not raw:
        return {}
    text = bytes(raw).decode("utf-8", "replace")
    out: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEP):
        name, sep, value = pair.partition(NAME_VALUE_SEP)
        if sep and name and value:
            out[name] = value
    return out


# ---- message ids (MessageDecoder.createMessageId) ------------------------------------
def offset_msg_id(store_ip: bytes, store_port: int, phys_offset: int) -> str:
    """Offset msgId: store host IPv4 (4) + port int32 + commit-log offset int64, 32 hex chars."""
    return (store_ip + struct.pack(">iq", store_port, phys_offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(ip, port, commit-log offset) of a 32-hex-char offset msgId; ValueError when malformed."""
    if len(msg_id) != 32:
        raise ValueError(f"offset message id must be 32 hex characters, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    port, offset = struct.unpack(">iq", raw[4:])
    return socket.inet_ntoa(raw[:4]), port, offset


# ---- decoding ------------------------------------------------------------------------
@dataclass(slots=True)
class StoredMessage:
    """A decoded record. ``body`` and ``raw`` may be memoryviews into the mapping (zero-copy):
    they are valid as long as the caller holds them (the mapping is kept alive by them)."""

    topic: str
    queue_id: int
    queue_offset: int
    phys_offset: int
    size: int
    flag: int
    sysflag: int
    born_timestamp: int
    born_host: tuple[str, int]
    store_timestamp: int
    store_host: tuple[str, int]
    reconsume_times: int
    prepared_offset: int
    body_crc: int
    body: memoryview | bytes
    properties: dict[str, str] = field(default_factory=dict)
    raw: memoryview | bytes | None = None

    @property
    def tags(self) -> str | None:
        return self.properties.get("TAGS")

    @property
    def keys(self) -> list[str]:
        k = self.properties.get("KEYS")
        return [w for w in k.split(" ") if w] if k else []

    @property
    def msg_id(self) -> str:
        """The UNIQ_KEY a client set, else the offset msg id (what Java clients show)."""
        return self.properties.get("UNIQ_KEY") or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        ip, port = self.store_host
        return offset_msg_id(socket.inet_aton(ip), port, self.phys_offset)


def decode_record(buf, pos: int = 0, *, copy: bool = False) -> StoredMessage:
    """Decode the record at ``buf[pos:]``. Raises StoreCorrupt when it is not a record."""
    mv = memoryview(buf)
    if len(mv) - pos < RECORD_FIXED:
        raise StoreCorrupt(f"record at {pos}: {len(mv) - pos} bytes is shorter than a record header")
    (total, magic, crc, qid, flag, qoff, phys, sysflag, born_ts, born_ip, born_port, store_ts,
     store_ip, store_port, reconsume, prepared, blen) = HEADER.unpack_from(mv, pos)
    if magic != MESSAGE_MAGIC:
        raise StoreCorrupt(f"record at {pos}: bad magic {magic:#x}")
    if total < RECORD_FIXED or pos + total > len(mv) or blen < 0 or RECORD_FIXED + blen > total:
        raise StoreCorrupt(f"record at {pos}: bad sizes (total {total}, body {blen})")
    b0 = pos + R_BODYLEN + 4
    body = mv[b0:b0 + blen]
    t0 = b0 + blen
    tlen = mv[t0]
    topic = bytes(mv[t0 + 1:t0 + 1 + tlen]).decode("utf-8", "replace")
    p0 = t0 + 1 + tlen
    if p0 + 2 > pos + total:  # a topic length pointing past the record (found by fuzzing)
        raise StoreCorrupt(f"record at {pos}: topic length {tlen} runs past TOTALSIZE {total}")
    (plen,) = struct.unpack_from(">h", mv, p0)
    if plen < 0 or RECORD_FIXED + blen + tlen + plen != total:
        raise StoreCorrupt(f"record at {pos}: lengths do not add up to TOTALSIZE {total}")
    props = decode_properties(mv[p0 + 2:p0 + 2 + plen])
    raw = mv[pos:pos + total]
    if copy:
        body, raw = bytes(body), bytes(raw)
    return StoredMessage(
        topic=topic, queue_id=qid, queue_offset=qoff, phys_offset=phys, size=total, flag=flag,
        sysflag=sysflag, born_timestamp=born_ts, born_host=(socket.inet_ntoa(born_ip), born_port),
        store_timestamp=store_ts, store_host=(socket.inet_ntoa(store_ip), store_port),
        reconsume_times=reconsume, prepared_offset=prepared, body_crc=crc, body=body,
        properties=props, raw=raw)


def iter_records(buf):
    """Decode a run of records (a pull response body)."""
    mv = memoryview(buf)
    pos = 0
    while pos < len(mv):
        msg = decode_record(mv, pos)
        yield msg
        pos += msg.size


# ---- encoding (pure Python; the C append is the production encoder) ------------------
def encode_record(*, topic: str, body: bytes, properties: bytes = b"", queue_id: int = 0,
                  flag: int = 0, queue_offset: int = 0, phys_offset: int = 0, sysflag: int = 0,
                  born_timestamp: int = 0, born_host: tuple[str, int] = ("127.0.0.1", 0),
                  store_timestamp: int = 0, store_host: tuple[str, int] = ("127.0.0.1", 10911),
                  reconsume_times: int = 0, prepared_offset: int = 0) -> bytes:
    t = topic.encode()
    total = RECORD_FIXED + len(body) + len(t) + len(properties)
    head = HEADER.pack(total, MESSAGE_MAGIC, body_crc(body), queue_id, flag, queue_offset,
                       phys_offset, sysflag, born_timestamp, socket.inet_aton(born_host[0]),
                       born_host[1], store_timestamp, socket.inet_aton(store_host[0]),
                       store_host[1], reconsume_times, prepared_offset, len(body))
    return head + body + bytes([len(t)]) + t + struct.pack(">h", len(properties)) + properties


def encode_batch(entries: list[tuple[bytes, bytes, int]]) -> bytes:
    """A SEND_BATCH_MESSAGE body from (body, properties, flag) entries (MessageDecoder.encodeMessages)."""
    out = bytearray()
    for body, props, flag in entries:
        total = 22 + len(body) + len(props)
        out += struct.pack(">iiiii", total, 0, 0, flag, len(body)) + body
        out += struct.pack(">h", len(props)) + props
    return bytes(out)
