"""A plain send_async / send_oneway whose connection is idle is written by the caller's own thread
(native/lane_direct.c, client/direct_write.py): frames from that write and from the loop thread's
leave whole and in each thread's order under concurrent senders, a partial write's rest goes to
the loop before anything else, an async send written so gets its answer or its timeout once, and
a burst still takes the lane."""
import random
import socket
import threading
import time

from shmq.client import direct_write
from shmq.client.message import Message, SendStatus
from shmq.errors import RemotingTimeout

from .test_oneway_lane import Sink, _producer, _wait


def _stop(p, sink):
    p.shutdown()
    p._ns.close()
    sink.close()


def _bodies(sink) -> list[bytes]:
    return [c.body for conn in sink.conns for c in conn]


def test_paced_sends_are_written_by_their_thread_in_order_and_answered():
    sink = Sink()
    p = _producer(sink)
    try:
        p.send_oneway(Message("T", b"checked"))  # the topic is checked: the plain sends take the lane
        lane, want, futs = p.instance.oneway_lane, [b"checked"], []
        for i in range(100):
            time.sleep(0.001)
            futs.append(p.send_async(Message("T", b"a%d" % i)))
            assert lane.last_direct or i < 3  # (the connection is opened by the first ones)
            time.sleep(0.001)
            p.send_oneway(Message("T", b"o%d" % i))
            want += [b"a%d" % i, b"o%d" % i]
        assert all(f.result(10).status is SendStatus.SEND_OK for f in futs)
        _wait(lambda: len(_bodies(sink)) >= len(want))
        assert _bodies(sink) == want and lane.direct_frames >= 190 and lane.queued == (0, 0)
        _wait(lambda: not p.instance.direct._open)  # the sweep dropped the answered ones
    finally:
        _stop(p, sink)


def test_a_burst_takes_the_lane():
    sink = Sink()
    p = _producer(sink)
    try:
        p.send_oneway(Message("T", b"checked"))
        time.sleep(0.01)
        lane = p.instance.oneway_lane
        before = lane.direct_frames
        for i in range(2000):
            p.send_oneway(Message("T", b"%d" % i))
        _wait(lambda: len(_bodies(sink)) >= 2001)
        assert _bodies(sink)[1:] == [b"%d" % i for i in range(2000)]
        assert lane.direct_frames - before < 200  # a burst's first frames at most, not one write per frame
    finally:
        _stop(p, sink)


def test_concurrent_senders_frames_leave_whole_and_in_each_threads_order():
    sink = Sink()
    p = _producer(sink)
    try:
        p.send_oneway(Message("T", b"checked"))
        futs: list = []
        errors: list = []

        def sender(t: int) -> None:
            rnd = random.Random(t)
            try:
                for i in range(400):
                    m = Message("T", b"t%d-%d" % (t, i) + b"x" * rnd.choice((10, 300, 3000)))
                    if i % 2:
                        futs.append(p.send_async(m))
                    else:
                        p.send_oneway(m)
                    if rnd.random() < 0.5:
                        time.sleep(rnd.choice((0.0001, 0.0005, 0.002)))
            except Exception as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=sender, args=(t,)) for t in range(4)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        assert all(f.result(10).status is SendStatus.SEND_OK for f in futs)
        _wait(lambda: len(_bodies(sink)) >= 1 + 4 * 400)
        got = _bodies(sink)[1:]  # every frame decoded: none was cut or interleaved
        assert len(got) == 4 * 400 and len(sink.conns) == 1
        for t in range(4):
            mine = [b.split(b"x")[0] for b in got if b.startswith(b"t%d-" % t)]
            assert mine == [b"t%d-%d" % (t, i) for i in range(400)]
        lane = p.instance.oneway_lane
        assert 0 < lane.direct_frames < 4 * 400  # both writers took part
    finally:
        _stop(p, sink)


class HeldSink(Sink):
    """A Sink whose reader waits for ``go`` before it reads, with a small receive buffer."""

    def __init__(self):
        self.go = threading.Event()
        super().__init__()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by the accepted socket

    def _serve_until_closed(self, c, got, first):
        self.go.wait(30)
        super()._serve_until_closed(c, got, first)


def test_a_partial_write_hands_its_rest_to_the_loop_before_anything_else():
    sink = HeldSink()
    p = _producer(sink, compress_msg_body_over=1 << 20)  # 60 KB bodies go as they are
    inst = p.instance
    partial: list = []

    def after(conn, opaque, timeout, part):
        partial.append(part)
        inst.direct.after(conn, opaque, timeout, part)

    inst.oneway_lane.direct(inst._direct_conn, after, direct_write.GAP_NS)
    try:
        p.send_oneway(Message("T", b"checked"))
        _wait(lambda: sink.addr in inst._clients and inst._clients[sink.addr].connection is not None)
        conn = inst._clients[sink.addr].connection
        conn._transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        want, futs = [b"checked"], []
        for i in range(3):  # paced small ones: the puts after them may go direct
            time.sleep(0.002)
            p.send_oneway(Message("T", b"small%d" % i))
            want.append(b"small%d" % i)
        assert inst.oneway_lane.last_direct
        for i in range(40):  # the socket fills: one direct write is cut, the rest go through the loop
            time.sleep(0.002)
            body = (b"%d-" % i).ljust(60_000, b"y")
            futs.append(p.send_async(Message("T", body))) if i % 2 else p.send_oneway(Message("T", body))
            want.append(body)
        assert True in partial
        sink.go.set()
        assert all(f.result(10).status is SendStatus.SEND_OK for f in futs)
        _wait(lambda: len(_bodies(sink)) >= len(want))
        assert _bodies(sink) == want
    finally:
        sink.go.set()
        _stop(p, sink)


def test_an_unanswered_send_written_by_its_thread_times_out_once():
    sink = Sink(mute=True)
    p = _producer(sink, send_timeout=0.3, retry_times_when_send_async_failed=0)
    try:
        p.send_oneway(Message("T", b"checked"))
        _wait(lambda: sink.addr in p.instance._clients and p.instance._clients[sink.addr].connection is not None)
        calls: list = []
        futs = []
        for i in range(20):
            time.sleep(0.001)
            futs.append(p.send_async(Message("T", b"%d" % i), calls.append))
        assert p.instance.oneway_lane.direct_frames >= 15
        t0 = time.monotonic()
        for f in futs:
            assert isinstance(f.exception(10), RemotingTimeout)
        assert time.monotonic() - t0 < 5
        time.sleep(0.1)
        assert len(calls) == 20 and all(isinstance(e, RemotingTimeout) for e in calls)
        assert not p.instance._clients[sink.addr].connection._pending
        _wait(lambda: not p.instance.direct._open)
    finally:
        _stop(p, sink)


def test_off_with_the_switch(monkeypatch):
    monkeypatch.setenv("SHMQ_CALLER_WRITE", "0")
    sink = Sink()
    p = _producer(sink)
    try:
        for i in range(20):
            time.sleep(0.001)
            p.send_oneway(Message("T", b"%d" % i))
        _wait(lambda: len(_bodies(sink)) >= 20)
        assert p.instance.oneway_lane.direct_frames == 0
    finally:
        _stop(p, sink)
