"""Message-level codecs the wire needs: properties text, batch body, offset msgId, masked CRC.

These are pure functions over bytes and strings. The CommitLog record codec (the pull body)
is the store's (``shmq.store``); the two packages never import each other.

Properties (``MessageDecoder.messageProperties2String``)::

    name \\x01 value \\x02 name \\x01 value [\\x02]

Java writes no trailing ``\\x02``; ali-ons and the C++ client do. Java's reader drops pairs
whose name or value is empty, and so does :func:`decode_properties`.

Batch body of SEND_BATCH_MESSAGE (``MessageDecoder.encodeMessages``), entries back to back:

=========  =====  =======================================================
field      width  meaning
=========  =====  =======================================================
totalSize  i32    size of this entry, these 4 bytes included
magic      i32    0 from Java clients; ignored
bodyCRC    i32    0 from Java clients; ignored (the broker recomputes it)
flag       i32    user flag
bodyLen    i32    then the body
propsLen   i16    then the properties text (UTF-8)
=========  =====  =======================================================

Offset msgId (``MessageDecoder.createMessageId``): store host IP (4 or 16 bytes), port i32,
commit-log offset i64, as uppercase hex: 32 characters for IPv4, 56 for IPv6.
"""
from __future__ import annotations

import ipaddress
import struct
import zlib
from collections.abc import Mapping
from typing import NamedTuple

from shmq.errors import BodyDecodeError

NAME_VALUE_SEPARATOR = "\x01"
PROPERTY_SEPARATOR = "\x02"


def masked_crc32(data: bytes | bytearray | memoryview) -> int:
    """``UtilAll.crc32``: zlib's CRC-32 with the top bit cleared (fits a positive Java int).

    REGISTER_BROKER's bodyCrc32 and a record's BODYCRC both use it."""
    return zlib.crc32(data) & 0x7FFFFFFF


# ---- properties ----------------------------------------------------------------------------
def encode_properties(props: Mapping[str, str]) -> str:
    """Java's form: no trailing separator. Pairs with a null value are skipped as in Java."""
    return PROPERTY_SEPARATOR.join(
        f"{k}{NAME_VALUE_SEPARATOR}{v}" for k, v in props.items() if v is not None
    )


def decode_properties(text: str | bytes | None) -> dict[str, str]:
    """Parse a properties string; a trailing or doubled separator and empty pairs are tolerated."""
    if not text:
        return {}
    if isinstance(text, (bytes, bytearray, memoryview)):
        text = bytes(text).decode(errors="replace")
    out: dict[str, str] = {}
    for pair in text.split(PROPERTY_SEPARATOR):
        name, sep, value = pair.partition(NAME_VALUE_SEPARATOR)
        if sep and name and value:
            out[name] = value
    return out


# ---- batch body ----------------------------------------------------------------------------
class BatchEntry(NamedTuple):
    body: bytes
    properties: str = ""
    flag: int = 0


_BATCH_HEAD = struct.Struct(">iiiii")  # totalSize, magic, bodyCRC, flag, bodyLen
_I16 = struct.Struct(">h")


def encode_batch(entries: list[BatchEntry]) -> bytes:
    parts: list[bytes] = []
    for e in entries:
        props = e.properties.encode()
        if len(props) > 0x7FFF:
            raise ValueError(f"properties of {len(props)} bytes exceed 32767")
        total = _BATCH_HEAD.size + len(e.body) + 2 + len(props)
        parts += (_BATCH_HEAD.pack(total, 0, 0, e.flag, len(e.body)), e.body, _I16.pack(len(props)), props)
    return b"".join(parts)


def decode_batch(data: bytes | bytearray | memoryview) -> list[BatchEntry]:
    """Split a batch body; every length is checked against the entry and the buffer."""
    out: list[BatchEntry] = []
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < _BATCH_HEAD.size + 2:
            raise BodyDecodeError("batch body", f"truncated entry header at byte {pos}")
        total, _magic, _crc, flag, blen = _BATCH_HEAD.unpack_from(data, pos)
        end = pos + total
        body_at = pos + _BATCH_HEAD.size
        if total < _BATCH_HEAD.size + 2 or end > n or blen < 0 or body_at + blen + 2 > end:
            raise BodyDecodeError("batch body", f"entry at byte {pos}: totalSize {total}, bodyLen {blen}")
        (plen,) = _I16.unpack_from(data, body_at + blen)
        props_at = body_at + blen + 2
        if plen < 0 or props_at + plen != end:
            raise BodyDecodeError("batch body", f"entry at byte {pos}: propsLen {plen} disagrees with totalSize")
        try:
            props = bytes(data[props_at:end]).decode()
        except UnicodeDecodeError:
            raise BodyDecodeError("batch body", f"entry at byte {pos}: properties are not UTF-8") from None
        out.append(BatchEntry(bytes(data[body_at : body_at + blen]), props, flag))
        pos = end
    return out


# ---- offset message id --------------------------------------------------------------------
class OffsetMsgId(NamedTuple):
    host: str
    port: int
    offset: int


def create_offset_msg_id(host: str, port: int, offset: int) -> str:
    ip = ipaddress.ip_address(host).packed
    return (ip + struct.pack(">iq", port, offset)).hex().upper()


def decode_offset_msg_id(msg_id: str) -> OffsetMsgId:
    """Inverse of :func:`create_offset_msg_id`; raises ``ValueError`` on anything else."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"offset msgId must be 32 or 56 hex digits, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    iplen = len(raw) - 12
    port, offset = struct.unpack_from(">iq", raw, iplen)
    return OffsetMsgId(str(ipaddress.ip_address(raw[:iplen])), port, offset)
