"""A client connection's loop-thread writes hold the GIL through their send() (native/lane_direct.c
``write_held``, ``ClientConnection._flush``): what the peer reads is every frame written, whole and
in order, also when the socket fills and the transport buffers the rest; a transport with
something buffered, of another kind, or closing is the transport's own write."""
from __future__ import annotations

import asyncio
import socket
import struct
import threading

import shmq.client  # noqa: F401  (the client layer gives client connections their held write)
from shmq.native import _oneway
from shmq.protocol.transport import ClientConnection, Connection, Limits


def _server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    return srv


async def _connect(port):
    loop = asyncio.get_running_loop()
    t, conn = await loop.create_connection(lambda: ClientConnection({}, Limits()), "127.0.0.1", port)
    t.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    return t, conn


def _frames(n):
    return [struct.pack(">II", i, 3000 + i % 997) + bytes([i % 251]) * (3000 + i % 997) for i in range(n)]


def test_frames_arrive_whole_and_in_order_through_held_and_buffered_writes(monkeypatch):
    calls = []

    def counted(t, data):
        n = _oneway.write_held(t, data)
        calls.append((n, len(data)))
        return n
    monkeypatch.setattr(ClientConnection, "held_write", staticmethod(counted))
    srv = _server()
    frames = _frames(600)
    got = bytearray()

    async def main():
        t, conn = await _connect(srv.getsockname()[1])
        peer, _ = await asyncio.get_running_loop().run_in_executor(None, srv.accept)
        for i in range(0, len(frames), 7):  # several flushes, the peer not reading yet: the socket fills
            for f in frames[i:i + 7]:
                conn.write_frame(f)
            await asyncio.sleep(0)
        reader = threading.Thread(target=lambda: _read_all(peer, got, sum(map(len, frames))))
        reader.start()
        while reader.is_alive():
            await asyncio.sleep(0.01)
        t.close()
        peer.close()

    asyncio.run(main())
    srv.close()
    assert bytes(got) == b"".join(frames)
    assert any(n > 0 for n, _ in calls), "the GIL-held send wrote nothing"
    assert any(n < size for n, size in calls), "no write met a full socket: the transport's part was not run"


def _read_all(s, into, size):
    while len(into) < size:
        b = s.recv(65536)
        if not b:
            break
        into += b


def test_the_transports_own_write_when_it_holds_bytes_or_is_not_a_socket_transport():
    srv = _server()

    async def main():
        t, conn = await _connect(srv.getsockname()[1])
        peer, _ = await asyncio.get_running_loop().run_in_executor(None, srv.accept)
        assert _oneway.write_held(t, b"abc") == 3
        t._buffer.extend(b"x") if isinstance(t._buffer, bytearray) else t._buffer.append(b"x")
        assert _oneway.write_held(t, b"def") == 0  # bytes queued before: they go first
        t._buffer.clear()
        assert _oneway.write_held(object(), b"abc") == 0
        assert _oneway.write_held(t, bytearray(b"abc")) == 0  # (not bytes: the transport's)
        t.close()
        assert _oneway.write_held(t, b"abc") == 0  # closing
        got = peer.recv(100)
        peer.close()
        return got

    assert asyncio.run(main()) == b"abc"
    srv.close()


def test_only_client_connections_hold_the_gil_through_their_writes():
    assert ClientConnection.held_write is _oneway.write_held
    assert Connection.held_write is None
