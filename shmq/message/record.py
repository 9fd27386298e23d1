"""The CommitLog record codec (layout in :mod:`shmq.message.layout`): the one decoder and a
pure-Python encoder for tests and tools (the C append is the production encoder).

A record is also the body of a pull, query-by-key and view response, so the client decodes
with the same function the store does.
"""
from __future__ import annotations

import socket
from dataclasses import dataclass, field

from shmq.errors import StoreCorrupt

from .layout import HEADER, HOST, I16, I32, MESSAGE_MAGIC, R_BODY, R_BODYLEN, RECORD_FIXED, masked_crc32
from .msgid import offset_msg_id
from .names import KEYS, TAGS, UNIQ_KEY
from .properties import decode_properties

_unpack = HEADER.unpack_from
_ntoa = socket.inet_ntoa


def unpack_record(mv: memoryview, pos: int = 0) -> tuple:
    """The one record decoder. ``mv`` must be a memoryview; the record at ``mv[pos:]`` is
    checked (magic, and every length against TOTALSIZE and the buffer) and returned as::

        (total, body_crc, queue_id, flag, queue_offset, phys_offset, sysflag, born_ts,
         born_host, store_ts, store_host, reconsume_times, prepared_offset,
         body, topic, properties)

    ``body`` is a memoryview into ``mv`` (zero-copy), ``properties`` the raw text (bytes),
    each host its 8 record bytes (see :func:`host_tuple`). StoreCorrupt when it is no record."""
    n = len(mv)
    if n - pos < RECORD_FIXED:
        raise StoreCorrupt(f"record at {pos}: {n - pos} bytes is shorter than a record header")
    (total, magic, crc, qid, flag, qoff, phys, sysflag, born_ts, born, store_ts, store, reconsume, prepared,
     blen) = _unpack(mv, pos)
    end = pos + total
    t0 = pos + R_BODY + blen
    if magic != MESSAGE_MAGIC:
        raise StoreCorrupt(f"record at {pos}: bad magic {magic:#x}")
    if blen < 0 or t0 + 3 > end or end > n:
        raise StoreCorrupt(f"record at {pos}: bad sizes (total {total}, body {blen})")
    p0 = t0 + 1 + mv[t0]
    if p0 + 2 > end:  # a topic length pointing past the record (found by fuzzing)
        raise StoreCorrupt(f"record at {pos}: topic length {mv[t0]} runs past TOTALSIZE {total}")
    if p0 + 2 + ((mv[p0] << 8) | mv[p0 + 1]) != end:
        raise StoreCorrupt(f"record at {pos}: lengths do not add up to TOTALSIZE {total}")
    return (total, crc, qid, flag, qoff, phys, sysflag, born_ts, born, store_ts, store, reconsume, prepared,
            mv[pos + R_BODY:t0], str(mv[t0 + 1:p0], "utf-8", "replace"), bytes(mv[p0 + 2:end]))


def host_tuple(raw: bytes) -> tuple[str, int]:
    """8 record bytes of a host -> (IPv4 text, port)."""
    ip, port = HOST.unpack(raw)
    return _ntoa(ip), port


def record_properties(record, pos: int = 0):
    """The raw properties text of the record at ``record[pos:]`` (a memoryview slice when
    ``record`` is one), nothing else decoded: what a SQL92 filter reads. The record must
    already be known good (the store verified it)."""
    t0 = pos + R_BODY + int.from_bytes(record[pos + R_BODYLEN:pos + R_BODY], "big", signed=True)
    p0 = t0 + 1 + record[t0]
    (plen,) = I16.unpack_from(record, p0)
    return record[p0 + 2:p0 + 2 + plen]


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
        return self.properties.get(TAGS)

    @property
    def keys(self) -> list[str]:
        k = self.properties.get(KEYS)
        return [w for w in k.split(" ") if w] if k else []

    @property
    def msg_id(self) -> str:
        """The UNIQ_KEY a client set, else the offset msg id (what Java clients show)."""
        return self.properties.get(UNIQ_KEY) or self.offset_msg_id

    @property
    def offset_msg_id(self) -> str:
        ip, port = self.store_host
        return offset_msg_id(HOST.pack(socket.inet_aton(ip), port), self.phys_offset)


def decode_record(buf, pos: int = 0, *, copy: bool = False) -> StoredMessage:
    """Decode the record at ``buf[pos:]``. Raises StoreCorrupt when it is not a record."""
    mv = memoryview(buf)
    (total, crc, qid, flag, qoff, phys, sysflag, born_ts, born, store_ts, store, reconsume, prepared, body, topic,
     props) = unpack_record(mv, pos)
    raw = mv[pos:pos + total]
    if copy:
        body, raw = bytes(body), bytes(raw)
    return StoredMessage(
        topic=topic, queue_id=qid, queue_offset=qoff, phys_offset=phys, size=total, flag=flag, sysflag=sysflag,
        born_timestamp=born_ts, born_host=host_tuple(born), store_timestamp=store_ts, store_host=host_tuple(store),
        reconsume_times=reconsume, prepared_offset=prepared, body_crc=crc, body=body,
        properties=decode_properties(props), raw=raw)


def iter_records(buf):
    """Decode a run of records (a pull response body)."""
    mv = memoryview(buf)
    pos = 0
    while pos < len(mv):
        msg = decode_record(mv, pos)
        yield msg
        pos += msg.size


def encode_record(*, topic: str, body: bytes, properties: bytes | str = b"", queue_id: int = 0,
                  flag: int = 0, queue_offset: int = 0, phys_offset: int = 0, sysflag: int = 0,
                  born_timestamp: int = 0, born_host: tuple[str, int] = ("127.0.0.1", 0),
                  store_timestamp: int = 0, store_host: tuple[str, int] = ("127.0.0.1", 10911),
                  reconsume_times: int = 0, prepared_offset: int = 0) -> bytes:
    """A record in pure Python, byte for byte what the C append writes for the same fields."""
    if isinstance(properties, str):
        properties = properties.encode()
    t = topic.encode()
    total = RECORD_FIXED + len(body) + len(t) + len(properties)
    head = HEADER.pack(total, MESSAGE_MAGIC, masked_crc32(body), queue_id, flag, queue_offset, phys_offset,
                       sysflag, born_timestamp, HOST.pack(socket.inet_aton(born_host[0]), born_host[1]),
                       store_timestamp, HOST.pack(socket.inet_aton(store_host[0]), store_host[1]),
                       reconsume_times, prepared_offset, len(body))
    return head + body + bytes([len(t)]) + t + I16.pack(len(properties)) + properties


def record_body(record, pos: int = 0):
    """The stored body of the known-good record at ``record[pos:]`` (a slice of ``record``),
    nothing else decoded: the store benchmark's reader."""
    (blen,) = I32.unpack_from(record, pos + R_BODYLEN)
    return record[pos + R_BODY:pos + R_BODY + blen]
