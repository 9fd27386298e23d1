"""native/conn_queue.c: a client connection's ``start_frame`` in C does what transport.py's Python
``Connection.start_frame`` does, over a real loopback TCP connection: the same bytes on the wire
in the same order, the same opaques (wrapping at Java's int), the answers reaching the same
waiters, one flush per loop turn (none of its own inside a read), the same RemotingClosed when
closed, a build's error raised with nothing queued; and the attributes it reads in the
connection's dict have no descriptor on any class of a client connection (conn_dict.h)."""
from __future__ import annotations

import asyncio
import socket

import pytest

import shmq.client.remote_send  # noqa: F401 - registers the C start_frame (transport.use_start_frame)
from shmq.errors import RemotingClosed
from shmq.native import _answer
from shmq.protocol import RemotingCommand
from shmq.protocol.command import encode_command
from shmq.protocol.transport import ClientConnection, Connection, Limits

from .test_read_path import _Waiter

#: how each way is called: the class's method (the C one) or the Python method of Connection
WAYS = {"c": lambda conn, build, w: conn.start_frame(build, w),
        "python": lambda conn, build, w: Connection.start_frame(conn, build, w)}


def _request(opaque: int) -> bytes:
    return encode_command(RemotingCommand(code=11, opaque=opaque, ext_fields={"k": str(opaque)}))


def _answer_of(opaque: int) -> bytes:
    return encode_command(RemotingCommand(code=11, opaque=opaque).make_response(0, None, {"a": "b"}))


async def _pair():
    loop = asyncio.get_running_loop()
    lsock = socket.create_server(("127.0.0.1", 0))
    _t, conn = await loop.create_connection(lambda: ClientConnection({}, Limits()), *lsock.getsockname()[:2])
    peer, _ = lsock.accept()
    lsock.close()
    peer.setblocking(False)
    return conn, peer


async def _read(peer, n: int) -> bytes:
    loop, data = asyncio.get_running_loop(), b""
    while len(data) < n:
        data += await asyncio.wait_for(loop.sock_recv(peer, 65536), 2.0)
    return data


def _session(way: str, first_opaque: int):
    """Three requests queued in one turn (opaques across the wrap), one more in a read: the bytes
    the peer got, the opaques, what the waiters heard, the loop callbacks the queueing scheduled."""
    async def go():
        conn, peer = await _pair()
        conn._next_opaque = first_opaque
        seen: list = []
        calls: list = []
        loop = asyncio.get_running_loop()
        real_call_soon = loop.call_soon
        loop.call_soon = lambda cb, *a, **k: (calls.append(getattr(cb, "__name__", "?")), real_call_soon(cb, *a, **k))[1]
        try:
            before = conn.last_activity
            opaques = [WAYS[way](conn, _request, _Waiter(seen, None)) for _ in range(3)]
            assert conn.last_activity >= before and conn._flush_scheduled
            got = await _read(peer, sum(len(_request(o)) for o in opaques))
            conn._in_read = True  # as during a read: the read's end flushes, nothing is scheduled
            opaques.append(WAYS[way](conn, _request, _Waiter(seen, None)))
            scheduled_in_read = conn._flush_scheduled or calls.count("_flush") > 1
            conn._in_read = False
            conn._flush()
            got += await _read(peer, len(_request(opaques[-1])))
        finally:
            loop.call_soon = real_call_soon
        await loop.sock_sendall(peer, b"".join(_answer_of(o) for o in reversed(opaques)))
        for _ in range(400):
            if len(seen) == len(opaques):
                break
            await asyncio.sleep(0.005)
        left = len(conn._pending)
        conn.close()
        peer.close()
        return got, opaques, seen, calls.count("_flush"), scheduled_in_read, left
    return asyncio.run(go())


@pytest.mark.parametrize("first", [0, 0x7FFFFFFE])
def test_c_start_frame_writes_numbers_and_answers_as_the_python_one(first):
    c, py = _session("c", first), _session("python", first)
    assert c == py
    got, opaques, seen, flushes, scheduled_in_read, left = c
    assert opaques == ([1, 2, 3, 4] if not first else [0x7FFFFFFF, 1, 2, 3])
    assert got == b"".join(_request(o) for o in opaques)
    assert seen == [("python", o) for o in reversed(opaques)] and left == 0
    assert flushes == 1 and not scheduled_in_read  # one flush for the turn's three, none in the read


def test_a_client_connection_runs_the_c_method_and_a_server_connection_the_python_one():
    assert ClientConnection.__dict__["start_frame"] is _answer.start_frame
    assert "start_frame" not in Connection.__dict__ or Connection.__dict__["start_frame"] is not _answer.start_frame


@pytest.mark.parametrize("way", sorted(WAYS))
@pytest.mark.parametrize("how", ["closed", "not connected"])
def test_a_closed_connection_raises_the_same_error(way, how):
    async def go():
        conn = ClientConnection({}, Limits())
        conn.peer = "1.2.3.4:10911"
        if how == "closed":
            conn._transport, conn.closed = object(), True
        with pytest.raises(RemotingClosed, match=r"^connection to 1\.2\.3\.4:10911 is closed$"):
            WAYS[way](conn, _request, _Waiter([], None))
        return conn._next_opaque, list(conn._out), len(conn._pending)
    assert asyncio.run(go()) == (0, [], 0)


@pytest.mark.parametrize("way", sorted(WAYS))
def test_a_build_that_raises_queues_nothing(way):
    async def go():
        conn, peer = await _pair()

        def bad(opaque):
            raise ValueError(f"no frame for {opaque}")
        with pytest.raises(ValueError, match="no frame for 1"):
            WAYS[way](conn, bad, _Waiter([], None))
        state = (conn._next_opaque, list(conn._out), len(conn._pending))
        conn.close()
        peer.close()
        return state
    assert asyncio.run(go()) == (1, [], 0)  # the number is used, as in the Python method


def test_the_attributes_read_in_the_dict_have_no_descriptor_on_the_class():
    """conn_queue.c and client_read.c read these in the instance dict: a property or slot of one
    of these names on a client connection's class would be bypassed."""
    names = {"closed", "_transport", "_next_opaque", "_out", "_pending", "_in_read", "_flush_scheduled", "_loop",
             "last_activity", "_now", "partial_since"}
    for cls in ClientConnection.__mro__:
        assert not names & set(vars(cls)), (cls, names & set(vars(cls)))

    async def go():  # and each is an instance attribute from __init__
        return set(vars(ClientConnection({}, Limits())))
    assert names <= asyncio.run(go())
