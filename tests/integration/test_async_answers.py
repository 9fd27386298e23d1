"""An async send's outcome reaches its caller exactly once whatever the broker does, with the
answers matched in C (native/remote_answer.c) or in Python: a refusal RocketMQ retries is sent
again and then succeeds, a refusal it does not retry fails at once, a broker that never answers
times each send out after its retries; every callback runs once and agrees with its Future.
The broker is a stand-in on loopback, so each answer is the test's choice."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from shmq import Message, Producer, SendStatus
from shmq.client.message import MessageQueue
from shmq.client.route import TopicPublishInfo
from shmq.errors import BrokerError, RemotingTimeout
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.frame import FrameDecoder

MID = "7F00000100002A9F%016X"


class FakeBroker(threading.Thread):
    """Answers each send: ``first`` is the code of a message's first answer (0: success; None:
    no answer at all), its later tries are answered with success. Counts the tries."""

    def __init__(self, first: int | None):
        super().__init__(daemon=True)
        self.first = first
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.srv.getsockname()[1]}"
        self.tries: dict[bytes, int] = {}

    def run(self) -> None:
        conn, _ = self.srv.accept()
        self.srv.close()
        with conn:
            self.serve(conn)

    def serve(self, conn) -> None:
        dec = FrameDecoder()
        while data := conn.recv(1 << 16):
            out = []
            for req in map(decode_command, dec.feed(data)):
                if req.code not in (310, 320):
                    continue  # a heartbeat
                n = self.tries[req.body] = self.tries.get(req.body, 0) + 1
                code = self.first if n == 1 else 0
                if code is None:
                    continue
                ext = {"msgId": MID % len(self.tries), "queueId": "0", "queueOffset": str(n)} if code == 0 else {}
                out.append(encode_command(req.make_response(code, None if code == 0 else "refused", ext)))
            if out:
                conn.sendall(b"".join(out))


@pytest.fixture(params=["C", "python"])
def answers_in(request, monkeypatch):
    if request.param == "python":  # the client connection without its C hook
        monkeypatch.setattr("shmq.client.instance.answers", None)
    return request.param


def sends(first: int | None, n: int, **settings):
    fake = FakeBroker(first)
    fake.start()
    ns = socket.create_server(("127.0.0.1", 0))  # a NameServer that never answers: the route is set here
    calls: dict[int, list] = {}
    lock = threading.Lock()

    def cb(k):
        def call(res) -> None:
            with lock:
                calls.setdefault(k, []).append(res)
        return call
    try:
        with Producer("pg-answers", f"127.0.0.1:{ns.getsockname()[1]}", local="never", **settings) as p:
            p.instance.broker_addrs["fake"] = {0: fake.addr}
            p.instance.publish["TA"] = TopicPublishInfo("TA", [MessageQueue("TA", "fake", 0)])
            futs = [p.send_async(Message("TA", b"m%d" % k), callback=cb(k)) for k in range(n)]
            outcomes = [f.exception(20) or f.result(0) for f in futs]
            time.sleep(0.2)  # a second call of any callback would land by now
    finally:
        ns.close()
        fake.join(5)
    assert sorted(calls) == list(range(n)) and all(len(v) == 1 for v in calls.values())
    assert all(calls[k][0] is outcomes[k] for k in range(n))
    return outcomes, fake.tries


def test_a_refusal_retried_then_answered_succeeds_once(answers_in):
    outcomes, tries = sends(14, 60, retry_times_when_send_async_failed=2)  # 14: busy, retried
    assert all(r.status is SendStatus.SEND_OK and r.queue_offset == 2 for r in outcomes)
    assert sorted(tries.values()) == [2] * 60


def test_a_refusal_not_retried_fails_once(answers_in):
    outcomes, tries = sends(13, 30, retry_times_when_send_async_failed=2)  # 13: not in RETRY_CODES
    assert all(isinstance(e, BrokerError) and e.code == 13 for e in outcomes)
    assert sorted(tries.values()) == [1] * 30


def test_no_answer_times_out_each_send_once_after_its_retries(answers_in):
    t0 = time.monotonic()
    outcomes, tries = sends(None, 20, retry_times_when_send_async_failed=1, send_timeout=0.3)
    # the retry is answered (a later try succeeds): each send is answered once, after one timeout
    assert all(r.status is SendStatus.SEND_OK for r in outcomes) and sorted(tries.values()) == [2] * 20
    assert time.monotonic() - t0 >= 0.3


def test_no_answer_and_no_retry_left_is_a_timeout(answers_in):
    outcomes, tries = sends(None, 20, retry_times_when_send_async_failed=0, send_timeout=0.3)
    assert all(isinstance(e, RemotingTimeout) for e in outcomes) and sorted(tries.values()) == [1] * 20
