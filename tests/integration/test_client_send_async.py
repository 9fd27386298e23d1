"""Async sends over TCP as a user sees them: ``send_async`` and ``send_batch_async`` callbacks fire
exactly once each, with the SendResult of their own message or batch, several batches pipelined
on the one connection; and when the connection drops with requests in flight, every one still
unanswered gets an error (none hangs, none fires twice)."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from shmq import Message, Producer, SendStatus
from shmq.client.message import MessageQueue
from shmq.client.remote_send import AsyncSend
from shmq.client.route import TopicPublishInfo
from shmq.errors import InvalidMessage, RemotingError
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.frame import FrameDecoder

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import Collector, consumer, make_topic, wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401


class Calls:
    """Callback results by key, and how often each key was called."""

    def __init__(self):
        self.lock = threading.Lock()
        self.got: dict = {}
        self.count: dict = {}

    def cb(self, key):
        def call(res) -> None:
            with self.lock:
                self.got[key] = res
                self.count[key] = self.count.get(key, 0) + 1
        return call

    def wait(self, n: int, timeout: float = 30.0) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if len(self.count) >= n:
                return True
            time.sleep(0.01)
        return False


def test_pipelined_batches_and_async_sends_each_get_their_own_result_once(namesrv, start_broker):
    b = start_broker(namesrv)
    make_topic(b, "TA", 4)
    wait_route(namesrv.addr, "TA")
    calls = Calls()
    with Producer("pg-async", namesrv.addr, local="never") as p:
        futs = [p.send_batch_async([Message("TA", b"b%d-%d" % (k, i), tags="t") for i in range(32)],
                                   callback=calls.cb(("b", k))) for k in range(12)]
        # each in flight on the connection, none sent and waited for by the caller (the sync
        # send_batch's first try, sync_send.send_batch_plain, is not send_batch_async's)
        assert all(f.__class__ is AsyncSend for f in futs)
        singles = [p.send_async(Message("TA", b"s%d" % k, keys=f"k{k}"), callback=calls.cb(("s", k)))
                   for k in range(50)]
        results = [f.result(20) for f in futs]
        single_results = [f.result(20) for f in singles]
        assert calls.wait(62)
        time.sleep(0.2)  # a second call of any callback would land by now
    assert set(calls.count.values()) == {1}
    assert all(r.status is SendStatus.SEND_OK for r in results + single_results)
    for k, r in enumerate(results):
        assert calls.got[("b", k)] is r
        assert len(r.msg_id.split(",")) == 32
    for k, r in enumerate(single_results):
        assert calls.got[("s", k)] is r
    col = Collector()
    c = consumer(namesrv.addr, "cg-async", "TA", col)
    try:
        assert col.wait_for(lambda s: len(s.msgs) >= 12 * 32 + 50), f"{len(col.msgs)} received"
    finally:
        c.shutdown()
    by_body = {m.body: m for m in col.msgs}
    assert len(col.msgs) == len(by_body) == 12 * 32 + 50
    for k, r in enumerate(results):
        # each batch: its 32 messages, consecutive in one queue, with the ids its result names
        msgs = [by_body[b"b%d-%d" % (k, i)] for i in range(32)]
        assert [m.msg_id for m in msgs] == r.msg_id.split(",")
        assert {m.queue_id for m in msgs} == {r.queue.queue_id}
        assert [m.queue_offset for m in msgs] == list(range(r.queue_offset, r.queue_offset + 32))
    for k, r in enumerate(single_results):
        m = by_body[b"s%d" % k]
        assert m.msg_id == r.msg_id and (m.queue_id, m.queue_offset) == (r.queue.queue_id, r.queue_offset)
        assert m.keys == [f"k{k}"]


def test_a_bad_batch_fails_its_future_with_the_sync_error(namesrv, start_broker):
    b = start_broker(namesrv)
    make_topic(b, "TB", 4)
    wait_route(namesrv.addr, "TB")
    with Producer("pg-bad", namesrv.addr, local="never") as p:
        calls = Calls()
        bad = [[], [Message("TB", b"a"), Message("TC", b"b")], [Message("TB", b"x", tags="A\x01")],
               [Message("TB", b"a", delay_level=2)]]
        futs = [p.send_batch_async(m, callback=calls.cb(i)) for i, m in enumerate(bad)]
        for f in futs:
            with pytest.raises(InvalidMessage):
                f.result(5)
        assert calls.wait(len(bad)) and all(isinstance(e, InvalidMessage) for e in calls.got.values())
        assert p.send_batch_async([Message("TB", b"fine")]).result(10).status is SendStatus.SEND_OK


class _AnswerSomeThenDrop(threading.Thread):
    """A broker stand-in on loopback: reads ``expect`` requests, answers the first ``answer``
    of them as a broker answers a send (queue offset = 1000 + its order), then drops the
    connection and stops listening."""

    def __init__(self, expect: int, answer: int):
        super().__init__(daemon=True)
        self.expect, self.answer = expect, answer
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.srv.getsockname()[1]}"
        self.seen: list = []

    def run(self) -> None:
        conn, _ = self.srv.accept()
        self.srv.close()
        dec = FrameDecoder()
        while len(self.seen) < self.expect:
            data = conn.recv(1 << 16)
            if not data:
                break
            # only the sends count (the client's heartbeat to a broker it knows may come too)
            self.seen += [c for c in map(decode_command, dec.feed(data)) if c.code in (310, 320)]
        for i, req in enumerate(self.seen[:self.answer]):
            conn.sendall(encode_command(req.make_response(0, None, {
                "msgId": "7F00000100002A9F%016X" % i, "queueId": "0", "queueOffset": str(1000 + i)})))
        time.sleep(0.2)  # the answers are read before the connection goes
        conn.close()


def test_a_connection_dropped_mid_flight_fails_every_unanswered_send_once(namesrv):
    fake = _AnswerSomeThenDrop(expect=60, answer=10)
    fake.start()
    calls = Calls()
    with Producer("pg-drop", namesrv.addr, local="never", retry_times_when_send_async_failed=0,
                  send_timeout=20) as p:
        p.instance.broker_addrs["fake"] = {0: fake.addr}
        p.instance.publish["TD"] = TopicPublishInfo("TD", [MessageQueue("TD", "fake", 0)])
        futs = [p.send_async(Message("TD", b"m%d" % k), callback=calls.cb(("s", k))) for k in range(50)]
        futs += [p.send_batch_async([Message("TD", b"b%d" % k)] * 4, callback=calls.cb(("b", k))) for k in range(10)]
        assert calls.wait(60, timeout=15), f"{len(calls.count)} of 60 callbacks"
        time.sleep(0.2)
    fake.join(5)
    assert set(calls.count.values()) == {1}
    answered = 0
    for f in futs:
        exc = f.exception(0)
        if exc is None:
            r = f.result(0)
            answered += 1
            assert r.status is SendStatus.SEND_OK and r.queue_offset >= 1000
        else:
            assert isinstance(exc, RemotingError)
    assert answered == 10 and len({r.opaque for r in fake.seen}) == 60


def test_oneway_to_a_broker_that_does_not_read_waits_then_times_out(namesrv):
    # oneway sends are written by the client's loop; one whose connection takes nothing more
    # (the peer reads nothing: its buffers and the transport's are full) makes the caller wait,
    # and after send_timeout it hears RemotingTimeout: memory stays bounded, nothing hangs
    srv = socket.create_server(("127.0.0.1", 0))
    addr = f"127.0.0.1:{srv.getsockname()[1]}"
    with Producer("pg-stuck", namesrv.addr, local="never", send_timeout=1.0) as p:
        p.instance.broker_addrs["stuck"] = {0: addr}
        p.instance.publish["TS"] = TopicPublishInfo("TS", [MessageQueue("TS", "stuck", 0)])
        body = b"x" * 4096
        sent, t0 = 0, time.monotonic()
        with pytest.raises(RemotingError, match="took nothing"):
            while sent < 100_000:  # ~400 MB if nothing held the caller back
                p.send_oneway(Message("TS", body))
                sent += 1
        assert time.monotonic() - t0 < 30 and sent < 20_000, sent
        conn, _ = srv.accept()  # once the peer reads, sends go again
        got, want = 0, sent * 4096
        conn.settimeout(10)
        while got < want:
            got += len(conn.recv(1 << 20))
        p.send_oneway(Message("TS", b"after"))
        conn.close()
    srv.close()
