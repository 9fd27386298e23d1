"""A sync client that polls for its answer before blocking (``spin_us``, Producer's
``sync_spin_us``) gets the same answers as a blocking one: an answer inside the spin, one after
it (then it blocks), the server's own requests skipped, and EOF during the spin is an error."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from shmq.errors import RemotingClosed
from shmq.protocol import RemotingCommand, RequestCode
from shmq.protocol.client import SyncRemotingClient
from shmq.protocol.codes import FLAG_RESPONSE
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.frame import FrameDecoder


def _server(delays: list[float], close_after: int | None = None):
    """A loopback server answering the i-th request after delays[i] s (a server request first on
    odd ones); it closes after ``close_after`` answers. Returns (port, thread)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)

    def run():
        with ls:
            serve(ls.accept()[0])

    def serve(s):
        dec, n = FrameDecoder(1 << 20), 0
        with s:
            while n < len(delays):
                data = s.recv(65536)
                if not data:
                    return
                for f in dec.feed(data):
                    req = decode_command(f)
                    time.sleep(delays[n])
                    if n % 2:
                        s.sendall(encode_command(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=999)))
                    s.sendall(encode_command(RemotingCommand(code=0, opaque=req.opaque, flag=FLAG_RESPONSE,
                                                             remark=f"r{n}")))
                    n += 1
                    if close_after is not None and n == close_after:
                        return

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return ls.getsockname()[1], t


@pytest.mark.parametrize("spin_us", [0, 200, 20_000])
def test_answers_inside_and_after_the_spin_are_the_same(spin_us):
    delays = [0, 0, 0.05, 0.001, 0, 0.03]  # some inside a 20 ms spin, some after a 200 us one
    port, t = _server(delays)
    c = SyncRemotingClient(f"127.0.0.1:{port}", timeout=5, spin_us=spin_us)
    try:
        got = [c.invoke(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2)).remark for _ in delays]
    finally:
        c.close()
    assert got == [f"r{i}" for i in range(len(delays))]
    t.join(5)


def test_the_server_closing_during_the_spin_is_an_error():
    port, t = _server([0, 0], close_after=1)
    c = SyncRemotingClient(f"127.0.0.1:{port}", timeout=5, spin_us=50_000)
    try:
        assert c.invoke(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2)).remark == "r0"
        with pytest.raises(RemotingClosed):
            c.invoke(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2))
    finally:
        c.close()


def test_blocking_mode_for_the_c_wait_and_back_for_every_python_read_or_write():
    """``block()`` leaves the socket in blocking mode (the C sync send sleeps in its recv, its
    wait bounded by SO_RCVTIMEO); the client's own requests put its timeout back first and get
    the same answers."""
    port, t = _server([0, 0])
    c = SyncRemotingClient(f"127.0.0.1:{port}", timeout=5)
    try:
        assert c.block_s == 0 and c.sock.gettimeout() == 5
        assert c.block() == 5 and c.block_s == 5 and c.sock.gettimeout() is None
        assert c.invoke(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2)).remark == "r0"
        assert c.block_s == 0 and c.sock.gettimeout() is not None
        c.block()
        c.send(RemotingCommand(code=RequestCode.SEND_MESSAGE_V2, opaque=7))
        assert c.block_s == 0 and c.sock.gettimeout() == 5
        assert c.response(7, 5).remark == "r1"
    finally:
        c.close()
    assert SyncRemotingClient.block(type("C", (), {"timeout": 0, "block_s": 0.0})()) == 0  # no bound: left as is
