"""A remoting connection's read path: the bytes of one read to frames, each frame served once, in
order. The methods of :class:`~shmq.protocol.transport.Connection` (a mixin, so that the read path
is one module and the rest of the connection another); their state is the connection's.

* A server or a client may take the common frames before they are decoded: ``fast(conn, data,
  pos)`` (``RemotingServer(fast=...)``: the broker worker's plain sends and common pulls, in C;
  ``RemotingClient(fast=...)``: the producer's async answers and the PushConsumer's pull answers,
  native/remote_answer.c) serves the complete frames it recognises from ``pos`` and returns
  ``(pos, answers or None, stop)``. With ``stop`` the frame at ``pos`` is complete and is served
  here, the normal way, before ``fast`` sees the frames after it: frames are served in their
  order whichever path serves them, and whatever ``fast`` does not take (an incomplete frame, a
  bad length, any other request) is the normal path's, errors included.
* The common read of such a connection is whole frames that ``fast`` takes all of, from a frame
  boundary (nothing held back from the read before). It is one call here and the flush: no
  split of the rest, no decoder, no per-read checks that only the other reads need (a caught-up
  TCP consumer makes this read once per message; bench/RESULTS.md, "Session 10, tcpread").
  Nothing is held back exactly when ``partial_since`` is None (set below whenever the decoder
  keeps the start of a frame, cleared when it keeps nothing), so that is what says the read
  starts at a frame boundary; any other read takes the general path.
"""
from __future__ import annotations

import logging

from shmq.errors import FrameError
from shmq.protocol.codes import FLAG_RESPONSE
from shmq.protocol.command import decode_command

log = logging.getLogger("shmq.remoting")


class ReadPath:
    """``asyncio.Protocol.data_received`` of a :class:`~shmq.protocol.transport.Connection`."""

    __slots__ = ()

    def data_received(self, data: bytes) -> None:
        now = self._now()
        self.last_activity = now
        self._in_read = True
        try:
            fast = self.fast
            if fast is not None and self._decoder.error is None:
                if self.partial_since is None:  # nothing held back: data starts with a frame
                    pos, answers, stop = fast(self, data, 0)
                    if answers is not None:
                        self._out.append(answers)
                    if pos == len(data):  # every frame taken (then stop is False): the common read
                        return
                    self._read_rest(data, stop, now, pos)
                    return
                self._rest(*self._serve_held(data), now)
            else:
                self._decode(data, False, now)
        finally:
            self._in_read = False
            self._flush()

    def _read_rest(self, data: bytes, stop: bool, now: float, pos: int = 0) -> None:
        """A read from a frame boundary, from ``pos``, the first frame ``fast`` did not take (``stop``:
        that frame is complete, the normal path's); the frames before it were served. Called in
        the read (``_in_read`` set; the caller flushes): by :meth:`data_received` and by the C
        reader (native/client_read.c), which passes the rest only."""
        self._rest(*self._serve_fast(data, pos, stop), now)

    def _rest(self, data: bytes, served: bool, now: float) -> None:
        """What ``fast`` left of a read (``served``: a frame of it was served), through the decoder."""
        if self._stopped() or not data:  # a protocol error: nothing after it is served; or
            self.partial_since = None     # every byte taken: nothing for the decoder
            return
        self._decode(data, served, now)

    def _decode(self, data: bytes, served: bool, now: float) -> None:
        """The rest of a read, through the frame decoder (``served``: a frame of it was served already)."""
        try:
            frames = self._decoder.feed(data) if data else []
        except FrameError as e:
            self._protocol_error(e)
            return
        # a partial frame's clock starts with that frame (a steady stream of large ones is fine)
        if not self._decoder.pending:
            self.partial_since = None
        elif frames or served or self.partial_since is None:
            self.partial_since = now
        self._serve_frames(frames)

    def _serve_held(self, data: bytes) -> tuple[bytes, bool]:
        """:meth:`_serve_fast` of a read that starts inside the frame held back: that frame
        completed from the read's head and served, then the read from where the frame ends, in
        place. The held part and the head are copied, not the whole read (a windowed async
        sender's reads start inside a frame as often as not: ~200 instructions a message when
        the read was glued to the held part whole). A read that does not complete the frame, a
        bad length word or a frame ``fast`` leaves to the decoder take the whole read, glued,
        as before; a read that leaves the held frame incomplete is left to the decoder, which
        appends it: taken out and glued at every read, a frame of n bytes in 64 KiB reads cost
        ~3n^2/128 KiB bytes of copying (a 4 MiB message 6x slower with a fast path set than
        without: RESULTS, "Session 13, curves13"); appended, each byte is copied once."""
        dec = self._decoder
        total = dec.pending_total()
        if total >= 4 and dec.pending + len(data) < 4 + total:
            return data, False
        held = dec.take_pending()
        h = len(held)
        word = held[:4] if h >= 4 else held + data[:4 - h]
        total = int.from_bytes(word, "big") if len(word) == 4 else -1
        need = 4 + total - h  # the bytes of this read that complete the frame
        if total < 4 or total + 4 > self._decoder.max_frame_size or need > len(data):
            return self._serve_fast(held + data, 0, None)
        left, served = self._serve_fast(held + data[:need], 0, None)
        if left or self._stopped():  # not taken whole (the decoder's), or the connection went
            return left + data[need:], served
        return self._serve_fast(data, need, None)[0], True

    def _serve_fast(self, data: bytes, pos: int, stop: bool | None) -> tuple[bytes, bool]:
        """The frames of ``data`` from ``pos`` through ``fast``, and each frame it does not take
        through ``_serve_frames``, in order (``stop`` not None: fast's answer at ``pos`` is known
        already); returns what is left for the frame decoder (an incomplete frame or a bad length
        word) and whether a frame was served."""
        fast, n, t = self.fast, len(data), self._transport
        while True:
            if stop is None:
                if pos >= n or self.closed or t is None or t.is_closing():  # (_stopped, inline: per frame)
                    break
                pos, answers, stop = fast(self, data, pos)
                if answers is not None:
                    self._out.append(answers)
            if not stop:
                break
            end = pos + 4 + int.from_bytes(data[pos:pos + 4], "big")
            self._serve_frames([data[pos + 4:end]])
            pos, stop = end, None
        return (data[pos:] if pos else data), pos > 0

    def _serve_frames(self, frames: list[bytes]) -> None:
        for frame in frames:
            if self.closed:
                return
            try:
                cmd = decode_command(frame)
            except FrameError as e:
                self._protocol_error(e)
                return
            if cmd.flag & FLAG_RESPONSE:
                fut = self._pending.pop(cmd.opaque, None)
                if fut is not None and not fut.done():
                    fut.set_result(cmd)
                elif log.isEnabledFor(logging.DEBUG):
                    log.debug("%s: response to unknown opaque %d dropped", self, cmd.opaque)
            else:
                self._dispatch(cmd, len(frame))
        if self._decoder.error is not None and not self.closed:
            self._protocol_error(self._decoder.error)

    def _stopped(self) -> bool:
        t = self._transport
        return self.closed or t is None or t.is_closing()
