"""Offset message ids (``MessageDecoder.createMessageId``): the store host's IP (4 bytes, or
16 for IPv6), its port (i32) and the record's commit-log offset (i64), as uppercase hex: 32
characters for IPv4, 56 for IPv6. A client can find the record from the id alone.

The store host travels as its raw bytes (IP + port, as in the record's STOREHOST), so the
hot paths format an id with one ``hex()``.
"""
from __future__ import annotations

import ipaddress
import struct
from typing import NamedTuple

_PORT_OFFSET = struct.Struct(">iq")


class OffsetMsgId(NamedTuple):
    host: str
    port: int
    offset: int


def host_bytes(host: str, port: int) -> bytes:
    """The raw store host: packed IP (4 or 16 bytes) + port i32."""
    return ipaddress.ip_address(host).packed + (port & 0xFFFFFFFF).to_bytes(4, "big")


def host_prefix(host_raw: bytes) -> str:
    """The hex head every offset msgId of this store host starts with (cache it)."""
    return host_raw.hex().upper()


def offset_msg_id(host_raw: bytes, phys_offset: int) -> str:
    """The offset msgId of the record at ``phys_offset`` stored by ``host_raw``."""
    return (host_raw + phys_offset.to_bytes(8, "big", signed=True)).hex().upper()


def offset_msg_id_after(prefix: str, phys_offset: int) -> str:
    """:func:`offset_msg_id` from a cached :func:`host_prefix` (the broker's send answer)."""
    return f"{prefix}{phys_offset & 0xFFFFFFFFFFFFFFFF:016X}"


def batch_msg_ids(prefix: str, phys_hex) -> str:
    """The comma-joined offset msgIds of a batch's records, from a cached :func:`host_prefix`
    and each record's commit-log offset as 16 hex digits (``ConsumeQueue.phys_hex``)."""
    return prefix + ("," + prefix).join(phys_hex)


def create_offset_msg_id(host: str, port: int, offset: int) -> str:
    return offset_msg_id(host_bytes(host, port), offset)


def decode_offset_msg_id(msg_id: str) -> OffsetMsgId:
    """(host, port, commit-log offset) of an IPv4 or IPv6 offset msgId; ValueError otherwise."""
    if len(msg_id) not in (32, 56):
        raise ValueError(f"offset msgId must be 32 or 56 hex digits, got {len(msg_id)}")
    raw = bytes.fromhex(msg_id)
    iplen = len(raw) - _PORT_OFFSET.size
    port, offset = _PORT_OFFSET.unpack_from(raw, iplen)
    return OffsetMsgId(str(ipaddress.ip_address(raw[:iplen])), port, offset)
