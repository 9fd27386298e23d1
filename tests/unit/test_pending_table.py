"""A client connection's requests in flight are one C table (native/pending_table.c, ``Pending``:
``Connection._pending``), and a lane segment's async sends a ``Run`` moved into it whole: the
table answers as the dict it replaces did, under any mix of sets, pops and look-ups; a Run's
waiters are moved, its opaques kept for the timer (``left``); and what a user sees of it holds
end to end: a lost connection fails every async send in flight once, with RemotingClosed; a send
that timed out hears nothing of its late answer."""
from __future__ import annotations

import asyncio
import random
import socket
import struct
import threading
import time

import pytest

from shmq.client.message import Message, MessageQueue
from shmq.client.producer import Producer  # noqa: F401 - binds the lane (async_lane)
from shmq.errors import RemotingClosed, RemotingTimeout
from shmq.native._answer import Pending, Run
from shmq.native._oneway import Lane
from shmq.protocol import RemotingCommand
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.transport import Connection, Limits

from .test_oneway_lane import _producer


@pytest.mark.parametrize("seed", range(4))
def test_the_table_answers_as_a_dict_under_any_mix_of_changes(seed):
    rnd = random.Random(seed)
    p, d = Pending(), {}
    # the connection's two numberings (positive, the lane's negative) and stray 64-bit keys
    keys = [rnd.randrange(-3000, 3000) for _ in range(500)] + [rnd.randrange(-2**63, 2**63) for _ in range(20)]
    for i in range(60_000):
        k, op = rnd.choice(keys), rnd.random()
        if op < 0.45:
            p[k] = d[k] = i
        elif op < 0.75:
            assert p.pop(k, None) == d.pop(k, None)
        elif op < 0.8 and k in d:
            del p[k], d[k]
        else:
            assert (k in p) == (k in d) and p.get(k) == d.get(k) and p.get(k, "x") == d.get(k, "x")
        if i % 5000 == 0:
            assert p == d and len(p) == len(d) and bool(p) == bool(d)
    assert p == d and sorted(p) == sorted(d) and sorted(p.items()) == sorted(d.items())
    # listed in each numbering's send order: the positive ascending, then -1, -2, ...
    order = sorted(d, key=lambda k: (k < 0, abs(k)))
    assert p.keys() == order and p.values() == [d[k] for k in order]
    with pytest.raises(KeyError):
        p[10**6]
    with pytest.raises(KeyError):
        p.pop(10**6)
    with pytest.raises(TypeError):
        p["x"] = 1
    assert "x" not in p and p.get(2**70) is None and p.pop(2**70, 5) == 5
    p.clear()
    assert p == {} and not p and len(p) == 0


def test_a_runs_waiters_move_into_the_table_and_its_opaques_stay_for_the_timer():
    lane = Lane([].append, "mark", 1 << 20, 1000)
    p = Producer("pg-table", local="never")
    mq = MessageQueue("T", "b", 0)
    t = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, False)
    m = Message("T", b"x")
    ws = [lane.put_async("a", t.template.pieces, 0, None, b"x", m, p, None, mq, 3.0, 0) for _ in range(5)]
    _, _, run, _ = lane.take()
    assert run.__class__ is Run and len(run) == 5 and list(run) == [-1, -2, -3, -4, -5]
    assert run.values() == ws and run.items() == list(zip([-1, -2, -3, -4, -5], ws))
    table = Pending()
    table[7] = "general"
    table.update(run)
    assert run.values() == [] and list(run) == [-1, -2, -3, -4, -5]  # moved; the keys stay
    assert table.keys() == [7, -1, -2, -3, -4, -5] and table.values() == ["general"] + ws
    del table[-2]
    assert table.pop(-4) is ws[3]
    assert table.left([9, run, 7, 8]) == [-1, -3, -5, 7]  # the timer's look: in its list's order


class _Holder:
    """A broker stand-in that reads a connection's frames and answers none of them until told:
    ``close_at`` frames in, it closes; ``answer_late()`` answers every request read so far."""

    def __init__(self, close_at: int | None = None):
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.srv.getsockname()[1]}"
        self.got: list[RemotingCommand] = []
        self.close_at = close_at
        self.sock: socket.socket | None = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        c, _ = self.srv.accept()
        self.sock = c
        buf = b""
        with c:
            while data := c.recv(1 << 20):
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                    n = 4 + struct.unpack_from(">i", buf)[0]
                    self.got.append(decode_command(buf[4:n]))
                    buf = buf[n:]
                if self.close_at is not None and len(self.got) >= self.close_at:
                    return

    def answer_late(self):
        for cmd in self.got:
            if not cmd.is_oneway:
                self.sock.sendall(encode_command(RemotingCommand(code=0, opaque=cmd.opaque, flag=1, ext_fields={
                    "msgId": "7F000001000000000000000000000001", "queueId": "0", "queueOffset": "1"})))

    def close(self):
        self.srv.close()


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_a_lost_connection_fails_every_async_send_in_flight_once():
    n = 300
    sink = _Holder(close_at=n + 1)  # the oneway, then every async send; none answered; then closed
    p = _producer(sink, retry_times_when_send_async_failed=0, send_timeout=30)
    try:
        p.send_oneway(Message("T", b"checked"))
        calls: dict = {}
        futs = [p.send_async(Message("T", b"%d" % i), lambda r, i=i: calls.__setitem__(i, calls.get(i, 0) + 1))
                for i in range(n)]
        _wait(lambda: len(sink.got) == n + 1)  # all read (none answered): the holder closes now
        conn = p.instance._clients[sink.addr]._conn
        assert isinstance(conn._pending, Pending)
        errors = [f.exception(10) for f in futs]
        assert all(isinstance(e, RemotingClosed) for e in errors), {type(e) for e in errors}
        _wait(lambda: len(calls) == n)
        assert set(calls.values()) == {1} and len(sink.got) == n + 1
        assert conn.closed and not conn._pending
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_a_timed_out_send_hears_nothing_of_its_late_answer():
    sink = _Holder()
    p = _producer(sink, retry_times_when_send_async_failed=0, send_timeout=0.3)
    try:
        p.send_oneway(Message("T", b"checked"))
        calls: list = []
        futs = [p.send_async(Message("T", b"%d" % i), calls.append) for i in range(100)]
        assert all(isinstance(f.exception(10), RemotingTimeout) for f in futs)
        conn = p.instance._clients[sink.addr].connection
        _wait(lambda: len(sink.got) == 101)
        sink.answer_late()  # every answer comes after its send timed out: each is dropped
        ok = p.send_async(Message("T", b"after"))  # a send after them is answered as usual
        _wait(lambda: len(sink.got) == 102)
        sink.got[:] = sink.got[101:]
        sink.answer_late()
        assert ok.result(10).queue_offset == 1
        time.sleep(0.1)
        assert len(calls) == 100 and all(isinstance(e, RemotingTimeout) for e in calls)
        assert all(isinstance(f.exception(0), RemotingTimeout) for f in futs)
        assert conn is p.instance._clients[sink.addr].connection and not conn.closed and not conn._pending
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_connections_keep_their_requests_in_the_c_table():
    async def go():
        return Connection({}, Limits())._pending
    assert isinstance(asyncio.run(go()), Pending)
