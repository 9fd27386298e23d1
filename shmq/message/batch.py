"""The body of SEND_BATCH_MESSAGE (``MessageDecoder.encodeMessages``): entries back to back.

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

The C append (``shmq_put_batch``) splits the same layout; tests hold the two together.
"""
from __future__ import annotations

import struct
from typing import NamedTuple

from shmq.errors import BodyDecodeError

from .layout import PROPS_MAX

ENTRY_HEAD = struct.Struct(">iiiii")   # totalSize, magic, bodyCRC, flag, bodyLen
_I16 = struct.Struct(">h")
#: bytes of an entry that are not body or properties
ENTRY_FIXED = ENTRY_HEAD.size + _I16.size


class BatchEntry(NamedTuple):
    body: bytes
    properties: str | bytes = ""
    flag: int = 0


def encode_batch(entries) -> bytes:
    """A batch body from BatchEntry (or (body, properties, flag)) items; properties as text or
    bytes."""
    parts: list[bytes] = []
    for body, props, flag in entries:
        if isinstance(props, str):
            props = props.encode()
        if len(props) > PROPS_MAX:
            raise ValueError(f"properties of {len(props)} bytes exceed {PROPS_MAX}")
        total = ENTRY_FIXED + len(body) + len(props)
        parts += (ENTRY_HEAD.pack(total, 0, 0, flag, len(body)), body, _I16.pack(len(props)), props)
    return b"".join(parts)


def decode_batch(data) -> list[BatchEntry]:
    """Split a batch body; every length is checked against the entry and the buffer."""
    out: list[BatchEntry] = []
    pos, n = 0, len(data)
    while pos < n:
        if n - pos < ENTRY_FIXED:
            raise BodyDecodeError("batch body", f"truncated entry header at byte {pos}")
        total, _magic, _crc, flag, blen = ENTRY_HEAD.unpack_from(data, pos)
        end = pos + total
        body_at = pos + ENTRY_HEAD.size
        if total < ENTRY_FIXED or end > n or blen < 0 or body_at + blen + 2 > end:
            raise BodyDecodeError("batch body", f"entry at byte {pos}: totalSize {total}, bodyLen {blen}")
        (plen,) = _I16.unpack_from(data, body_at + blen)
        props_at = body_at + blen + 2
        if plen < 0 or props_at + plen != end:
            raise BodyDecodeError("batch body", f"entry at byte {pos}: propsLen {plen} disagrees with totalSize")
        try:
            props = bytes(data[props_at:end]).decode()
        except UnicodeDecodeError:
            raise BodyDecodeError("batch body", f"entry at byte {pos}: properties are not UTF-8") from None
        out.append(BatchEntry(bytes(data[body_at:body_at + blen]), props, flag))
        pos = end
    return out
