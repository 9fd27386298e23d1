"""RocketMQ 4.x's HA wire protocol (HAService / HAConnection / HAClient), defined once here.

One TCP connection per slave to the master's ``haListenPort``; no handshake, no framing
beyond this:

* slave -> master: its max physical CommitLog offset, 8 bytes big-endian. Sent at connect
  (the first one says where to start), after every append it makes, and at least every
  ``haSendHeartbeatInterval``. The master reads only whole multiples of 8 and takes the last.
* master -> slave: frames of ``{offset i64, size i32}`` followed by ``size`` bytes of the
  CommitLog starting at ``offset``. ``size`` 0 is a heartbeat. A frame never crosses a
  CommitLog file (the master reads from one mapped file) and holds at most
  ``haTransferBatchSize`` (32 KiB) bytes; records may be cut anywhere.
"""
from __future__ import annotations

import struct

from shmq.errors import StoreError

REPORT = struct.Struct(">q")
HEADER = struct.Struct(">qi")
HEADER_SIZE = HEADER.size  # 12
#: haTransferBatchSize: the most CommitLog bytes in one frame (RocketMQ's default).
TRANSFER_BATCH = 32 * 1024
#: A frame announcing more than this is not RocketMQ's protocol (its largest is one batch;
#: a generous bound still refuses garbage before allocating for it).
MAX_FRAME_BODY = 16 * 1024 * 1024


class HAProtocolError(StoreError):
    """The peer sent something that is not RocketMQ's HA protocol, or that does not fit the
    log (an offset that is not where this side stands)."""


def report(offset: int) -> bytes:
    return REPORT.pack(offset)


def frame_header(offset: int, size: int) -> bytes:
    return HEADER.pack(offset, size)


class ReportReader:
    """Master side: turns the slave's byte stream into its latest reported offset."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> int | None:
        """The last whole offset in what arrived so far (None if no whole one yet)."""
        self._buf += data
        n = len(self._buf) - len(self._buf) % 8
        if n == 0:
            return None
        (offset,) = REPORT.unpack_from(self._buf, n - 8)
        del self._buf[:n]
        if offset < 0:
            raise HAProtocolError(f"slave reported a negative offset {offset}")
        return offset


class FrameReader:
    """Slave side: turns the master's byte stream into (offset, bytes) frames."""

    def __init__(self, max_body: int = MAX_FRAME_BODY) -> None:
        self._buf = bytearray()
        self.max_body = max_body

    def feed(self, data: bytes) -> list[tuple[int, bytes]]:
        self._buf += data
        out: list[tuple[int, bytes]] = []
        pos = 0
        buf = self._buf
        while len(buf) - pos >= HEADER_SIZE:
            offset, size = HEADER.unpack_from(buf, pos)
            if offset < 0 or size < 0 or size > self.max_body:
                raise HAProtocolError(f"bad HA frame header: offset {offset}, size {size}")
            if len(buf) - pos - HEADER_SIZE < size:
                break
            start = pos + HEADER_SIZE
            out.append((offset, bytes(buf[start:start + size])))
            pos = start + size
        if pos:
            del buf[:pos]
        return out


__all__ = ["REPORT", "HEADER", "HEADER_SIZE", "TRANSFER_BATCH", "HAProtocolError", "report",
           "frame_header", "ReportReader", "FrameReader"]
