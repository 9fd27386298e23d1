"""Splitting a byte stream into remoting frames: pure, no I/O.

Layout (see :mod:`shmq.protocol.command` for what follows the length word):

=======  =====  ===============================================================
offset   width  field
=======  =====  ===============================================================
0        i32    total: bytes after this word (mark + header + body), ≥ 4
4        i32    mark: serialize type (high byte) and header length (low 24 bits)
8        …      header, then body
=======  =====  ===============================================================

The length word is checked the moment its 4 bytes are in, before a byte of the frame is
buffered: a peer announcing 2 GiB costs us nothing but the 4 bytes it sent. Java's
``NettyDecoder`` caps a frame (length word included) at 16 MiB; so do we by default.
"""
from __future__ import annotations

import struct

from shmq.errors import FrameError, FrameTooLarge

__all__ = ["DEFAULT_MAX_FRAME_SIZE", "FrameDecoder"]

#: ``maxFrameSize``: the largest frame accepted, its own length word included (Java: 16 MiB).
DEFAULT_MAX_FRAME_SIZE = 16 * 1024 * 1024

_I32 = struct.Struct(">i")


class FrameDecoder:
    """Incremental splitter: :meth:`feed` bytes, get back complete frames.

    Each returned frame is ``mark | header | body`` (the length word stripped), ready for
    :func:`shmq.protocol.command.decode_command`. A bad length word ends the stream: the
    frames before it in the same chunk are still returned (and should be served, as Java's
    decoder does), :attr:`error` is set, and every later :meth:`feed` raises it.
    """

    __slots__ = ("_buf", "max_frame_size", "error")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE):
        self._buf = bytearray()
        self.max_frame_size = max_frame_size
        self.error: FrameError | None = None

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back (0 at a frame boundary)."""
        return len(self._buf)

    def pending_total(self) -> int:
        """The length word of the incomplete frame held back; -1 while fewer than its 4 bytes are."""
        return _I32.unpack_from(self._buf, 0)[0] if len(self._buf) >= 4 else -1

    def take_pending(self) -> bytes:
        """The incomplete frame held back, removed from the buffer: for a caller that splits the
        stream itself from there (a server's fast path, transport.py) and feeds back what it
        leaves."""
        data = bytes(self._buf)
        self._buf.clear()
        return data

    def _check(self, total: int) -> None:
        if total < 4:
            raise FrameError(f"frame length {total} is smaller than its mark word")
        if total + 4 > self.max_frame_size:
            raise FrameTooLarge(total + 4, self.max_frame_size)

    def feed(self, data: bytes | bytearray | memoryview) -> list[bytes]:
        if self.error is not None:
            raise self.error
        frames: list[bytes] = []
        try:
            self._split(data, frames)
        except FrameError as e:
            self.error = e
            self._buf.clear()
            if not frames:
                raise
        return frames

    def _split(self, data: bytes | bytearray | memoryview, frames: list[bytes]) -> None:
        buf = self._buf
        if not buf:
            # Fast path: whole frames straight out of the chunk, no copy into the buffer.
            pos, n = 0, len(data)
            while n - pos >= 4:
                (total,) = _I32.unpack_from(data, pos)
                self._check(total)
                end = pos + 4 + total
                if end > n:
                    break
                frames.append(bytes(data[pos + 4 : end]))
                pos = end
            if pos < n:
                buf += data[pos:]
            return
        buf += data
        pos, n = 0, len(buf)
        try:
            while n - pos >= 4:
                (total,) = _I32.unpack_from(buf, pos)
                self._check(total)
                end = pos + 4 + total
                if end > n:
                    break
                frames.append(bytes(buf[pos + 4 : end]))
                pos = end
        finally:
            if pos:
                del buf[:pos]
