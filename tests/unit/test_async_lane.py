"""A plain send_async over TCP is written whole by one C call into the client's lane, with its
opaque and its waiter (client/async_lane.py, native/hot_oneway.c's put_async): its frame is byte
for byte the template path's (RemoteSend.frame) but for its negative opaque, it leaves in order
with the oneways and the other requests, each future hears its answer, its timeout or its lost
connection exactly once (retried as the general path retries), with the answers read in C or, with
SHMQ_ANSWER_FAST=0, in Python."""
import time

import pytest

from shmq.client import instance as instance_mod
from shmq.client.message import Message, MessageQueue, SendStatus
from shmq.client.oneway import Lane
from shmq.client.producer import _TAGS_END, _TAGS_HEAD, _UNIQ_HEAD, Producer
from shmq.client.remote_send import AsyncSend
from shmq.errors import RemotingTimeout
from shmq.protocol.codes import FLAG_ONEWAY
from shmq.protocol.command import decode_command

from .test_oneway_lane import TAGS, Sink, _frames, _producer, _wait


def test_the_lane_frame_is_the_template_frame_and_its_waiter_the_general_paths():
    p = Producer("pg%dgrp", local="never")
    mq = MessageQueue("T%d", "b", 3)
    jobs: list = []
    lane = Lane(jobs.append, "mark", 1 << 20, 1000)
    target = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, False)
    sent, cb = [], lambda r: None
    for i, tags in enumerate(TAGS * 2):
        body, flag = b"b%d" % i * (i + 1), i % 4
        m = Message(mq.topic, body, tags=tags, flag=flag)
        w = lane.put_async("127.0.0.1:1", target.template.pieces, flag, tags, body, m, p, cb, mq, 2.5, 1)
        assert w.__class__ is AsyncSend and not w.done() and w.running()
        assert (w.mq, w.req, w.timeout, w.left, w.producer, w._callback) == (mq, m, 2.5, 1, p, cb)
        sent.append((tags, body, flag, w))
    assert jobs == [("127.0.0.1:1", "mark", None, 0)]
    addr, data, waiters, timeout = lane.take()
    assert timeout == 2.5 and list(waiters) == [-(i + 1) for i in range(len(sent))]
    for raw, (tags, body, flag, w), (opaque, waiter) in zip(_frames(data), sent, waiters.items(), strict=True):
        cmd = decode_command(raw[4:])
        assert not cmd.flag & FLAG_ONEWAY and cmd.body == body and cmd.opaque == opaque and waiter is w
        text = cmd.ext_fields["i"]
        assert text == (_TAGS_HEAD + tags + _TAGS_END if tags else _UNIQ_HEAD) + w.uniq
        req = w._request(w.req)  # what a retry sends: the general path's request, same UNIQ_KEY
        req.born_ms = int(cmd.ext_fields["g"])
        assert raw == req.frame(opaque)
    assert lane.queued == (0, 0) and lane.take() is None


def test_a_timeout_between_async_sends_opens_a_new_segment_and_the_bound_holds():
    p = Producer("pg", local="never")
    mq = MessageQueue("T", "b", 0)
    jobs: list = []
    lane = Lane(jobs.append, "mark", 1 << 20, 3)
    t = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, False)
    m = Message("T", b"x")
    put = lambda timeout: lane.put_async("a", t.template.pieces, 0, None, b"x", m, p, None, mq, timeout, 0)  # noqa
    put(1.0), put(1.0), put(2.0)
    assert len(jobs) == 2 and put(2.0) == 4  # FULL: nothing written
    got = [(len(w), to) for _, _, w, to in iter(lane.take, None)]
    assert got == [(2, 1.0), (1, 2.0)]


@pytest.mark.parametrize("fast", [True, False])
def test_async_sends_are_answered_in_order_with_oneways_and_general_sends(fast, monkeypatch):
    if not fast:  # SHMQ_ANSWER_FAST=0: the answers take the Python path
        monkeypatch.setattr(instance_mod, "answers", None)
    sink = Sink()
    p = _producer(sink)
    try:
        p.send_oneway(Message("T", b"checked"))  # the topic is checked: later plain ones take the lanes
        calls: dict = {}
        futs, want = [], [b"checked"]
        for i in range(1500):
            body = b"%d" % i
            if i % 250 == 3:
                futs.append((i, p.send_async(Message("T", body, keys="k"))))  # not plain: the general path
            elif i % 3 == 0:
                p.send_oneway(Message("T", body))
            else:
                futs.append((i, p.send_async(Message("T", body, tags="A" if i % 2 else None),
                                             lambda r, i=i: calls.__setitem__(i, calls.get(i, 0) + 1))))
            want.append(body)
        for i, f in futs:
            r = f.result(10)
            assert r.status is SendStatus.SEND_OK and r.queue == MessageQueue("T", "sink", 0)
        _wait(lambda: len(sink.conns[0]) >= len(want))
        got = sink.conns[0]
        assert [c.body for c in got] == want
        plain = [c for c in got if not c.is_oneway and "k" not in c.ext_fields.get("i", "")[:12]]
        assert plain and all(c.opaque < 0 for c in plain)  # the lane's; the general path's are positive
        assert set(calls.values()) == {1} and len(calls) == sum(1 for i, _ in futs if i % 250 != 3)
        assert futs[1][1].result().msg_id == futs[1][1].uniq  # the UNIQ_KEY the frame carried
        assert p.instance.oneway_lane.queued == (0, 0)
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_unanswered_async_sends_time_out_once_each():
    sink = Sink(mute=True)
    p = _producer(sink, send_timeout=0.3, retry_times_when_send_async_failed=0)
    try:
        p.send_oneway(Message("T", b"checked"))
        calls: list = []
        futs = [p.send_async(Message("T", b"%d" % i), calls.append) for i in range(200)]
        for f in futs:
            assert isinstance(f.exception(10), RemotingTimeout)
        time.sleep(0.1)
        assert len(calls) == 200 and all(isinstance(e, RemotingTimeout) for e in calls)
        assert not p.instance._clients[sink.addr].connection._pending
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_a_lost_connection_retries_each_send_once_on_a_new_one():
    sink = Sink(close_after=50, mute=True)  # the first connection takes 50 frames, answers none, closes
    p = _producer(sink, retry_times_when_send_async_failed=1)
    try:
        p.send_oneway(Message("T", b"checked"))
        calls: dict = {}
        futs = [p.send_async(Message("T", b"%d" % i), lambda r, i=i: calls.__setitem__(i, calls.get(i, 0) + 1))
                for i in range(300)]
        results = [f.result(10) for f in futs]
        assert all(r.status is SendStatus.SEND_OK for r in results)
        assert len(calls) == 300 and set(calls.values()) == {1}
        assert len(sink.conns) >= 2 and len(sink.conns[0]) == 50
        retried = {c.ext_fields["i"][-32:] for conn in sink.conns[1:] for c in conn}
        first = {c.ext_fields["i"][-32:] for c in sink.conns[0][1:]}
        assert first <= retried  # every send the first connection took went again, same UNIQ_KEY
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_a_put_whose_allocation_runs_a_finalizer_that_takes_the_lane_keeps_its_frame_and_waiter():
    """A GC object's allocation may collect (CPython 3.11) and a finalizer then runs Python code,
    during which the loop thread may take the lane's segment: here the finalizer takes it itself.
    The put's frame and waiter still reach a take, once, and the lane's counts match what it holds
    (a Run allocated after the segment was chosen went into a freed segment: both lost)."""
    import gc

    p = Producer("pg", local="never")
    mq = MessageQueue("T", "b", 0)
    jobs: list = []
    taken: list = []

    class Taker:
        def __del__(self):
            taken.extend(iter(lane.take, None))

    def append(job):  # the marker's append leaves a cycle with a finalizer for the next collection
        jobs.append(job)
        gc.disable()
        t = Taker()
        t.me = t
        del t
        gc.set_threshold(1)
        gc.enable()

    lane = Lane(append, "mark", 1 << 20, 1000)
    t = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, False)
    old = gc.get_threshold()
    try:
        ws = [lane.put_async("a", t.template.pieces, 0, None, b"x%d" % i, Message("T", b"x"), p, None, mq, 1.0, 0)
              for i in range(3)]
        gc.collect()
    finally:
        gc.set_threshold(*old)
    taken.extend(iter(lane.take, None))
    assert lane.queued == (0, 0)
    frames = [f for _, data, _, _ in taken for f in _frames(data)]
    waiters = [w for _, _, run, _ in taken if run is not None for w in run.values()]
    assert len(frames) == 3 and waiters == ws
