"""RemotingServer / RemotingClient / Connection behaviour, in one process on loopback."""
from __future__ import annotations

import asyncio
import socket
import struct
import time

import pytest

from shmq.errors import NoPermission, RemotingClosed, RemotingTimeout
from shmq.protocol import (
    Connection,
    FrameDecoder,
    RemotingClient,
    RemotingCommand,
    RemotingServer,
    RequestCode,
    ResponseCode,
    SerializeType,
    SyncRemotingClient,
    decode_command,
    request,
)
from shmq.protocol.command import encode_command

SLOW, FAST, SILENT, BOOM, DENY, ECHO = 1000, 1001, 1002, 1003, 1004, 1005


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


class App:
    def __init__(self):
        self.release = asyncio.Event()
        self.started = 0
        self.oneways: list[RemotingCommand] = []
        self.closed: list[Connection] = []
        self.conns: list[Connection] = []

    async def slow(self, conn, cmd):
        self.started += 1
        await self.release.wait()
        return cmd.make_response(body=b"slow")

    def fast(self, conn, cmd):  # a plain function: answered inline
        self.conns.append(conn)
        return cmd.make_response(body=b"fast")

    async def silent(self, conn, cmd):
        self.oneways.append(cmd)
        return None

    async def boom(self, conn, cmd):
        raise ValueError("boom")

    def deny(self, conn, cmd):
        raise NoPermission(16, "not yours")

    async def echo(self, conn, cmd):
        return RemotingCommand(code=0, ext_fields=dict(cmd.ext_fields), body=cmd.body)

    def server(self, **kw) -> RemotingServer:
        return RemotingServer({SLOW: self.slow, FAST: self.fast, SILENT: self.silent, BOOM: self.boom,
                               DENY: self.deny, ECHO: self.echo}, "127.0.0.1", 0,
                              on_close=self.closed.append, **kw)


def test_slow_handler_does_not_block_the_next_request_on_the_same_connection():
    async def main():
        app = App()
        async with app.server() as srv, RemotingClient(srv.address) as c:
            slow = asyncio.ensure_future(c.invoke(request(SLOW), timeout=5))
            await asyncio.sleep(0.05)
            fast = await c.invoke(request(FAST), timeout=1)
            assert fast.body == b"fast" and not slow.done()
            app.release.set()
            assert (await slow).body == b"slow"
            assert len(srv.connections) == 1
    run(main())


def test_unknown_code_errors_and_oneway():
    async def main():
        app = App()
        async with app.server() as srv, RemotingClient(srv.address) as c:
            r = await c.invoke(request(4242))
            assert (r.code, r.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, " request type 4242 not supported")
            r = await c.invoke(request(BOOM))
            assert r.code == ResponseCode.SYSTEM_ERROR and r.remark == "ValueError: boom"
            r = await c.invoke(request(DENY))
            assert (r.code, r.remark) == (16, "not yours")
            await c.invoke_oneway(request(SILENT, a=1))
            await c.invoke_oneway(request(4242))  # unknown and oneway: no answer either
            assert (await c.invoke(request(FAST))).code == 0
            assert [m.ext_fields for m in app.oneways] == [{"a": "1"}]
    run(main())


def test_oneway_is_never_answered_on_the_wire():
    async def main():
        app = App()
        async with app.server() as srv:
            def client():
                with SyncRemotingClient(srv.address) as c:
                    c.invoke_oneway(request(FAST))
                    c.invoke_oneway(request(BOOM))
                    nxt = request(ECHO, x="y")
                    nxt.opaque = 77
                    c.send(nxt)
                    first = c.receive()
                    assert first.opaque == 77 and first.ext_fields == {"x": "y"}
            await asyncio.to_thread(client)
    run(main())


def test_timeout_and_late_answer_dropped():
    async def main():
        app = App()
        async with app.server() as srv, RemotingClient(srv.address) as c:
            with pytest.raises(RemotingTimeout):
                await c.invoke(request(SLOW), timeout=0.2)
            app.release.set()  # the late answer arrives and is dropped
            await asyncio.sleep(0.05)
            assert (await c.invoke(request(FAST))).body == b"fast"
    run(main())


def test_server_calls_the_client_on_its_connection():
    async def main():
        app = App()
        got: list[RemotingCommand] = []

        async def notify(conn, cmd):
            got.append(cmd)
            return cmd.make_response(ext_fields={"seen": cmd.ext_fields["consumerGroup"]})

        async with app.server() as srv, RemotingClient(srv.address, handlers={
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: notify}) as c:
            await c.invoke(request(FAST))
            (conn,) = app.conns
            assert conn.peer == c.connection.local
            r = await conn.send_request(request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, consumerGroup="g"), 2)
            assert r.ext_fields == {"seen": "g"}
            conn.send_oneway(request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, consumerGroup="h"))
            r = await conn.send_request(request(RequestCode.CHECK_TRANSACTION_STATE), 2)
            assert r.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
            await asyncio.sleep(0.05)
            assert [m.ext_fields["consumerGroup"] for m in got] == ["g", "h"]
    run(main())


def test_close_hooks_and_pending_requests_fail():
    async def main():
        app = App()
        srv = app.server()
        await srv.start()
        c = RemotingClient(srv.address)
        pending = asyncio.ensure_future(c.invoke(request(SLOW), timeout=5))
        await asyncio.sleep(0.05)
        await srv.close()  # closes the connection under the parked request
        with pytest.raises(RemotingClosed):
            await pending
        assert len(app.closed) == 1 and app.closed[0].closed
        await c.close()
    run(main())


def test_idle_connection_closed():
    async def main():
        app = App()
        async with app.server(idle_timeout=0.2) as srv, RemotingClient(srv.address) as c:
            await c.invoke(request(FAST))
            conn = c.connection
            await asyncio.wait_for(conn.wait_closed(), 3)
            assert len(app.closed) == 1
            assert (await c.invoke(request(FAST))).code == 0  # the client reconnects
    run(main())


def raw_socket_closed(addr: str, data: bytes) -> bool:
    host, port = addr.split(":")
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(data)
        return s.recv(100) == b""


def test_partial_frame_times_out_and_oversize_closes():
    async def main():
        app = App()
        async with app.server(frame_timeout=0.2, max_frame_size=1024) as srv, RemotingClient(srv.address) as good:
            whole = encode_command(request(FAST))
            assert await asyncio.to_thread(raw_socket_closed, srv.address, whole[:7])
            assert await asyncio.to_thread(raw_socket_closed, srv.address, struct.pack(">i", 1021) + b"x")
            big = encode_command(request(ECHO, body=b"x" * 2000))
            assert await asyncio.to_thread(raw_socket_closed, srv.address, big)
            ok = encode_command(request(ECHO, body=b"x" * 900))
            assert len(ok) <= 1024
            assert (await good.invoke(request(ECHO, body=b"x" * 900))).body == b"x" * 900
    run(main())


def test_binary_request_answered_in_binary():
    async def main():
        app = App()
        async with app.server() as srv:
            def client():
                with SyncRemotingClient(srv.address) as c:
                    cmd = request(ECHO, k="v", body=b"b")
                    cmd.serialize_type = SerializeType.ROCKETMQ
                    r = c.invoke(cmd)
                    assert r.serialize_type == SerializeType.ROCKETMQ and r.ext_fields == {"k": "v"}
            await asyncio.to_thread(client)
    run(main())


def test_inflight_limit_pauses_reading():
    async def main():
        app = App()
        async with app.server(max_inflight=2) as srv, RemotingClient(srv.address) as c:
            calls = [asyncio.ensure_future(c.invoke(request(SLOW), timeout=5)) for _ in range(5)]
            await asyncio.sleep(0.2)
            assert app.started == 2
            app.release.set()
            assert all(r.code == 0 for r in await asyncio.gather(*calls))
            assert app.started == 5
    run(main())


def test_reuse_port_two_servers_one_port():
    async def main():
        app = App()
        async with app.server(reuse_port=True) as a:
            b = RemotingServer({FAST: app.fast}, "127.0.0.1", a.port, reuse_port=True)
            await b.start()
            try:
                assert b.port == a.port
            finally:
                await b.close()
    if not hasattr(socket, "SO_REUSEPORT"):
        pytest.skip("no SO_REUSEPORT")
    run(main())


def test_stream_of_frames_split_across_reads_is_not_a_stalled_partial_frame():
    async def main():
        app = App()
        # Generous margins (4x between writes) so a loaded machine does not stretch a pause
        # past the timeout: the point is that the clock restarts with every frame.
        async with app.server(frame_timeout=1.0) as srv:
            def client() -> bytes:
                host, port = srv.address.split(":")
                stream = b"".join(encode_command(request(ECHO, i=i)) for i in range(12))
                size = len(stream) // 12
                cuts = [int(size * (k + 0.5)) for k in range(12)] + [len(stream)]  # always mid-frame
                with socket.create_connection((host, int(port)), timeout=5) as s:
                    # 13 writes over ~3.3 s, 3x the frame timeout, each ending inside a frame.
                    prev = 0
                    for cut in cuts:
                        s.sendall(stream[prev:cut])
                        prev = cut
                        time.sleep(0.25)
                    s.shutdown(socket.SHUT_WR)
                    data = b""
                    while chunk := s.recv(65536):
                        data += chunk
                    return data

            data = await asyncio.to_thread(client)
            answers = [decode_command(f) for f in FrameDecoder().feed(data)]
            assert len(answers) == 12 and all(a.code == 0 for a in answers)
    run(main())


def test_connection_limits():
    async def main():
        app = App()
        async with app.server(max_connections_per_peer=2) as srv:
            clients = [RemotingClient(srv.address) for _ in range(3)]
            try:
                for c in clients[:2]:
                    assert (await c.invoke(request(FAST))).code == 0
                with pytest.raises(RemotingClosed):
                    await clients[2].invoke(request(FAST), timeout=2)
                assert len(srv.connections) == 2
            finally:
                for c in clients:
                    await c.close()
    run(main())


def test_good_request_before_garbage_in_one_write_is_still_answered():
    async def main():
        app = App()
        async with app.server() as srv:
            def client() -> list[int]:
                host, port = srv.address.split(":")
                good = encode_command(request(FAST))
                with socket.create_connection((host, int(port)), timeout=5) as s:
                    s.sendall(good + struct.pack(">i", 0x7FFFFFFF))
                    data = b""
                    while chunk := s.recv(65536):
                        data += chunk
                return [decode_command(f).code for f in FrameDecoder().feed(data)]
            assert await asyncio.to_thread(client) == [0]
    run(main())


def test_pipelined_requests_in_one_write_are_all_answered_in_order_and_then_closed():
    # the answers of one read are coalesced into one write: none may be lost or reordered,
    # mixed inline (FAST) and task (ECHO) answers included, nor those written just before a close
    async def main():
        app = App()
        async with app.server() as srv:
            def client() -> list[tuple[int, bytes]]:
                host, port = srv.address.split(":")
                reqs = b""
                for i in range(64):
                    cmd = request(FAST if i % 2 else ECHO, body=str(i).encode())
                    cmd.opaque = i + 1
                    reqs += encode_command(cmd)
                got: list = []
                with socket.create_connection((host, int(port)), timeout=5) as s:
                    s.sendall(reqs)
                    dec = FrameDecoder()
                    while len(got) < 64:
                        chunk = s.recv(65536)
                        assert chunk, f"closed after {len(got)} answers"
                        got += [(c.opaque, c.body) for c in map(decode_command, dec.feed(chunk))]
                return got
            got = await asyncio.to_thread(client)
            assert sorted(o for o, _ in got) == list(range(1, 65))
            fast = [o for o, b in got if b == b"fast"]
            assert fast == sorted(fast) and len(fast) == 32  # inline answers leave in request order
            assert {b for o, b in got if o % 2} == {str(i).encode() for i in range(0, 64, 2)}
    run(main())


def test_answer_written_just_before_close_still_arrives():
    def answer_and_close(conn, cmd):
        resp = cmd.make_response(body=b"last")
        resp.opaque, resp.flag = cmd.opaque, 1
        conn.send(resp)
        conn.close()
        return None

    async def main():
        async with RemotingServer({FAST: answer_and_close}, "127.0.0.1", 0) as srv:
            def client() -> list[bytes]:
                host, port = srv.address.split(":")
                with socket.create_connection((host, int(port)), timeout=5) as s:
                    s.sendall(encode_command(request(FAST)))
                    data = b""
                    while chunk := s.recv(65536):
                        data += chunk
                return [decode_command(f).body for f in FrameDecoder().feed(data)]
            assert await asyncio.to_thread(client) == [b"last"]
    run(main())


def test_deferred_answers_count_as_in_flight_and_arrive_later():
    """A handler may take conn.defer(cmd), return None and answer later without a task (the
    SYNC_FLUSH sends): the answers arrive, and until then they count against max_inflight."""
    LATER = 1010
    held = []

    def later(conn, cmd):
        held.append(conn.defer(cmd))

    async def main():
        async with RemotingServer({LATER: later}, "127.0.0.1", 0, max_inflight=2) as srv, \
                RemotingClient(srv.address) as c:
            calls = [asyncio.ensure_future(c.invoke(request(LATER, n=str(i)), timeout=5)) for i in range(5)]
            await asyncio.sleep(0.2)
            assert len(held) == 2 and not any(f.done() for f in calls)  # reading paused at 2
            conn = held[0].conn
            assert conn.busy
            for i in range(5):
                while len(held) <= i:
                    await asyncio.sleep(0.01)
                d = held[i]
                d.answer(d.req.make_response(body=d.req.ext_fields["n"].encode()))
                d.answer(d.req.make_response(body=b"twice"))  # a second answer is dropped
            assert [r.body for r in await asyncio.gather(*calls)] == [str(i).encode() for i in range(5)]
            assert not conn.busy
    run(main())
