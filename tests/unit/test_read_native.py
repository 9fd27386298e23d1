"""protocol/read_native.py + native/client_read.c: a client connection read by the C reader serves
what the Python path (asyncio's transport reader and read_path.py) serves, in the same order, over
a real loopback TCP connection: answers the C hook takes and answers it leaves, a frame split
across reads, a 4 MiB frame (held once, not copied at every read), a bad length word (the
connection closes with the frames before it served), EOF inside a frame and a peer's reset
(connection_lost as asyncio reports it), reading paused under back-pressure and resumed, close."""
from __future__ import annotations

import asyncio
import socket
import struct

import pytest

from shmq.client.remote_send import AsyncSend, answers
from shmq.protocol import RemotingCommand, read_native
from shmq.protocol.command import encode_command
from shmq.protocol.transport import Connection, Limits

from .test_read_path import _Waiter  # a waiter the C hook does not know: its answer is the Python path's
from .test_remote_answer import MQ, NO_RETRY, answer


class _Conn(Connection):
    def connection_lost(self, exc):
        self.lost = exc
        super().connection_lost(exc)


def _plain(opaque: int, body: bytes = b"") -> bytes:
    return encode_command(RemotingCommand(code=0, opaque=opaque).make_response(0, None, {"k": "v"}, body=body))


async def _pair(c_reader: bool, limits: Limits | None = None):
    """(conn, peer socket): a client connection on this loop to a raw loopback peer, read by the
    C reader or by asyncio's transport."""
    loop = asyncio.get_running_loop()
    lsock = socket.create_server(("127.0.0.1", 0))
    t, conn = await loop.create_connection(lambda: _Conn({}, limits or Limits()), *lsock.getsockname()[:2])
    peer, _ = lsock.accept()
    lsock.close()
    peer.setblocking(False)  # (written with loop.sock_sendall: a 4 MiB write must not block the loop)
    conn.lost = "open"
    conn.fast = answers
    assert read_native.attach(conn) if c_reader else conn._reader is None
    return conn, peer


def _waiters(conn, seen, opaques):
    """AsyncSends (the C hook's when their answer is a SUCCESS) for odd opaques, _Waiters for even."""
    for o in opaques:
        if o % 2:
            conn._pending[o] = AsyncSend(NO_RETRY, lambda r, o=o: seen.append(("send", o, type(r).__name__)), MQ, None, "U", 3)
        else:
            conn._pending[o] = _Waiter(seen, o)


async def _settle(conn, until=lambda: False, s=2.0):
    for _ in range(int(s / 0.005)):
        if until():
            return
        await asyncio.sleep(0.005)


def _run(c_reader: bool, chunks, opaques, *, end=None):
    """The chunks written one by one (each read on its own), then ``end`` ("eof", "reset"): what
    each waiter heard, in order, what connection_lost got, and whether bytes are still held."""
    async def go():
        conn, peer = await _pair(c_reader)
        seen: list = []
        _waiters(conn, seen, opaques)
        for c in chunks:
            await asyncio.get_running_loop().sock_sendall(peer, c)
            await _settle(conn, lambda: conn._decoder.pending or not conn._pending, 0.02)
        await _settle(conn, lambda: not conn._pending or conn.closed, 0.3)
        if end == "eof":
            peer.shutdown(socket.SHUT_WR)
        elif end == "reset":
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        if end is not None:
            peer.close()
            await _settle(conn, lambda: conn.closed)
        held = conn.partial_since is not None
        lost = conn.lost if conn.lost in ("open", None) else type(conn.lost).__name__
        conn.close()
        peer.close()
        await _settle(conn, lambda: conn.closed)
        return seen, lost, held
    return asyncio.run(go())


OPAQUES = [1, 2, 3, 5, 4, 7, 6, 9]


def _stream():
    frames = [answer(1, offset=11), _plain(2), answer(3, code=14, remark="busy"), answer(5, offset=55),
              _plain(4, b"body" * 10), answer(7, offset=77), _plain(6), answer(9, offset=99)]
    return b"".join(frames), [len(f) for f in frames]


def test_the_c_reader_serves_the_frames_the_python_reader_serves_in_order_whole_or_split():
    stream, sizes = _stream()
    whole = _run(False, [stream], OPAQUES)
    assert [s[:2] for s in whole[0]] == [("send", 1), ("python", 2), ("send", 3), ("send", 5), ("python", 4),
                                         ("send", 7), ("python", 6), ("send", 9)]
    assert whole[0][2] == ("send", 3, "BrokerError") and whole[1:] == ("open", False)
    assert _run(True, [stream], OPAQUES) == whole
    bounds = [sum(sizes[:i]) for i in range(1, len(sizes))]
    # cut inside the length word, inside a header, at a frame boundary, one byte before and after it
    cuts = sorted({2, sizes[0] + 10, bounds[2], bounds[3] - 1, bounds[3] + 1, len(stream) - 3})
    for k in cuts:
        assert _run(True, [stream[:k], stream[k:]], OPAQUES) == whole, k
    pieces = [stream[i:i + 37] for i in range(0, len(stream), 37)]
    assert _run(True, pieces, OPAQUES) == whole


def test_a_4_mib_frame_is_held_once_and_served_in_order(monkeypatch):
    from shmq.protocol.frame import FrameDecoder
    taken: list[int] = []
    real = FrameDecoder.take_pending

    def counted(self):
        data = real(self)
        taken.append(len(data))
        return data
    monkeypatch.setattr(FrameDecoder, "take_pending", counted)
    big = _plain(2, bytes(range(256)) * (4 * 4096))
    stream = answer(1) + big + answer(3) + _plain(4)

    def run(c_reader):
        taken.clear()
        got = _run(c_reader, [stream], [1, 2, 3, 4])
        return got, len(taken), sum(taken) < len(big)
    py, c = run(False), run(True)
    assert c == py
    assert [s[:2] for s in c[0][0]] == [("send", 1), ("python", 2), ("send", 3), ("python", 4)]
    assert c[1] <= 1 and c[2]  # the held part taken out at most once, and less than the frame


def test_a_bad_length_word_closes_with_the_frames_before_it_served():
    bad = struct.pack(">i", 64 * 1024 * 1024)  # over the frame limit
    stream = answer(1) + _plain(2) + bad + answer(3)
    for chunks in ([stream], [stream[:len(answer(1)) + 5], stream[len(answer(1)) + 5:]]):
        py, c = _run(False, chunks, [1, 2, 3]), _run(True, chunks, [1, 2, 3])
        assert c == py
        assert [s[:2] for s in c[0]] == [("send", 1), ("python", 2), ("send", 3)]
        assert c[0][2] == ("send", 3, "RemotingClosed") and c[1] is None  # closed by us


@pytest.mark.parametrize("end", ["eof", "reset"])
def test_eof_or_a_reset_inside_a_frame_is_the_transports_as_before(end):
    stream = answer(1) + _plain(2) + answer(3)
    chunks = [stream[:-7]]  # frame 3 incomplete
    py, c = _run(False, chunks, [1, 2, 3], end=end), _run(True, chunks, [1, 2, 3], end=end)
    assert c == py
    assert [s[:2] for s in c[0]] == [("send", 1), ("python", 2), ("send", 3)]
    assert c[1] == (None if end == "eof" else "ConnectionResetError")


def test_reading_pauses_under_back_pressure_and_resumes_in_order():
    async def go():
        conn, peer = await _pair(True)
        seen: list = []
        _waiters(conn, seen, [1, 2, 3, 4])
        conn.pause_writing()  # the peer does not read our writes: reading stops
        assert conn._read_paused and not conn._transport.is_reading()
        await asyncio.get_running_loop().sock_sendall(peer, answer(1) + _plain(2))
        await _settle(conn, lambda: seen, 0.2)
        paused = list(seen)
        conn.resume_writing()
        await _settle(conn, lambda: len(seen) == 2)
        await asyncio.get_running_loop().sock_sendall(peer, _plain(4)[:9])
        await _settle(conn, lambda: conn._decoder.pending, 0.5)
        await asyncio.get_running_loop().sock_sendall(peer, _plain(4)[9:] + answer(3))
        await _settle(conn, lambda: len(seen) == 4)
        conn.close()
        await _settle(conn, lambda: conn.closed)
        await asyncio.get_running_loop().sock_sendall(peer, _plain(9))  # after the close: nothing more is read
        await asyncio.sleep(0.05)
        peer.close()
        return paused, [s[:2] for s in seen], conn.lost
    paused, seen, lost = asyncio.run(go())
    assert paused == [] and seen == [("send", 1), ("python", 2), ("python", 4), ("send", 3)] and lost is None


def test_a_connection_without_the_c_hook_keeps_the_transports_reader():
    async def go():
        loop = asyncio.get_running_loop()
        lsock = socket.create_server(("127.0.0.1", 0))
        _, conn = await loop.create_connection(lambda: _Conn({}, Limits()), *lsock.getsockname()[:2])
        lsock.close()
        conn.fast = None
        attached = read_native.attach(conn)
        conn.close()
        return attached, conn._reader
    assert asyncio.run(go()) == (False, None)


def test_a_read_is_served_whole_after_a_pending_waiter_is_failed_by_the_loss():
    async def go():
        conn, peer = await _pair(True)
        seen: list = []
        _waiters(conn, seen, [1, 2])
        await asyncio.get_running_loop().sock_sendall(peer, answer(1))
        await _settle(conn, lambda: seen)
        peer.close()
        await _settle(conn, lambda: conn.closed)
        return [s[:3] for s in seen]
    assert asyncio.run(go()) == [("send", 1, "SendResult"), ("failed", 2, "RemotingClosed")]


def test_a_frame_held_by_the_c_reader_runs_the_frame_timeout_clock():
    """The start of a frame the C reader keeps sets partial_since (the sweeper closes a peer that
    never finishes it) with the clock of that frame; the frame's end clears it."""
    async def go():
        conn, peer = await _pair(True)
        seen: list = []
        _waiters(conn, seen, [1, 3])
        loop = asyncio.get_running_loop()
        stream = answer(1) + answer(3)
        await loop.sock_sendall(peer, stream[:-5])
        await _settle(conn, lambda: seen and conn.partial_since is not None)
        held = (conn.partial_since is not None, conn._decoder.pending, [s[:2] for s in seen])
        late = conn.check_timeouts(conn.partial_since + conn.limits.frame_timeout + 1)
        await loop.sock_sendall(peer, stream[-5:])
        await _settle(conn, lambda: len(seen) == 2)
        done = (conn.partial_since, [s[:2] for s in seen])
        conn.close()
        peer.close()
        return held, late, done
    held, late, done = asyncio.run(go())
    assert held == (True, 0, [("send", 1)]) and late and late.startswith("partial frame")
    assert done == (None, [("send", 1), ("send", 3)])
