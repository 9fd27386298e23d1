"""A plain send_oneway over TCP is written whole by one C call into the client's oneway lane
(client/oneway.py, native/hot_oneway.c): its frame is byte for byte the template path's
(RemoteSend.frame, itself the generic encoder's), frames leave in the order they were sent with
the other requests of the same thread, the lane never holds more than its bound, and a broken
connection loses what was in flight but not the sends after it."""
import socket
import struct
import threading
import time

import pytest

from shmq.client.message import Message, MessageQueue
from shmq.client.oneway import EMONTH, FULL, LOOK, NEW, UNSUPPORTED, Lane
from shmq.client.producer import _TAGS_END, _TAGS_HEAD, _UNIQ_HEAD, Producer
from shmq.client.route import TopicPublishInfo
from shmq.protocol.codes import FLAG_ONEWAY
from shmq.protocol.command import RemotingCommand, decode_command, encode_command

TAGS = [None, "", "TagA", 'q"\\b', "ünï 中", "%d%%s"]


def _frames(data: bytes) -> list[bytes]:
    out, pos = [], 0
    while pos < len(data):
        (total,) = struct.unpack_from(">i", data, pos)
        out.append(data[pos:pos + 4 + total])
        pos += 4 + total
    assert pos == len(data)
    return out


def _pieces() -> tuple[bytes, ...]:
    frames = Producer("pg", local="never")._frames
    return frames.get(MessageQueue("T", "b", 0), "TBW102", 4, False, True).template.pieces


def _put(lane, *args):
    st = lane.put(*args)
    while st == LOOK or st == EMONTH:  # EMONTH: not in this month's test run, but handled as the caller does
        st = lane.put(*args)
    return st


def test_the_lane_frame_is_the_template_frame_byte_for_byte():
    p = Producer("pg%dgrp", local="never")  # a % in the group and the topic: the template escapes them
    mq = MessageQueue("T%d", "b", 3)
    jobs: list = []
    lane = Lane(jobs.append, "mark", 1 << 20, 1000)
    t = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, True).template
    sent = []
    for i, tags in enumerate(TAGS * 3):
        body = b"b%d" % i * (i + 1)
        flag = i % 4
        assert _put(lane, "127.0.0.1:1", t.pieces, 0, flag, tags, body) in (0, NEW)
        sent.append((tags, body, flag))
    assert jobs == [("127.0.0.1:1", "mark", None, 0)]  # one segment, one marker job
    addr, data, waiters, _ = lane.take()
    assert addr == "127.0.0.1:1" and waiters is None and lane.take() is None and lane.queued == (0, 0)
    frames = _frames(data)
    uniqs = set()
    for raw, (tags, body, flag) in zip(frames, sent, strict=True):
        cmd = decode_command(raw[4:])
        assert cmd.flag & FLAG_ONEWAY and cmd.body == body
        text = cmd.ext_fields["i"]
        uniq = text[-32:]
        uniqs.add(uniq)
        assert text == (_TAGS_HEAD + tags + _TAGS_END if tags else _UNIQ_HEAD) + uniq
        req = p._remote(mq, flag, body, text, 0, batch=False, oneway=True)
        req.born_ms = int(cmd.ext_fields["g"])
        assert abs(req.born_ms - time.time() * 1000) < 60_000
        assert raw == req.frame(cmd.opaque)
    assert len(uniqs) == len(sent)
    assert [decode_command(f[4:]).opaque for f in frames] == list(range(1, len(sent) + 1))


def test_tags_the_c_encoder_does_not_escape_are_left_to_python_nothing_written():
    lane = Lane([].append, "mark", 1 << 20, 1000)
    pieces = _pieces()
    for tags in ("a\tb", "x\n", "\x01"):
        assert _put(lane, "a", pieces, 0, 0, tags, b"x") == UNSUPPORTED
    assert lane.queued == (0, 0) and lane.take() is None


def test_the_bound_holds_and_frees_as_taken():
    jobs: list = []
    lane = Lane(jobs.append, "mark", 10_000, 50)
    pieces = _pieces()
    n = 0
    while (st := _put(lane, "a", pieces, 0, 0, None, b"x" * 500)) != FULL:
        n += 1
    size = lane.queued[0] // n
    assert 10_000 < lane.queued[0] <= 10_000 + size and lane.full()
    lane.take()
    assert lane.queued == (0, 0) and not lane.full()
    assert _put(lane, "a", pieces, 0, 0, None, b"x") == NEW  # the taken segment is closed
    lane.charge(20_000)  # bytes held elsewhere (a connection being opened) count too
    assert lane.full() and _put(lane, "a", pieces, 0, 0, None, b"x") == FULL
    lane.charge(-20_000)
    assert len(jobs) == 2
    lane = Lane(jobs.append, "mark", 1 << 20, 50)
    while _put(lane, "a", pieces, 0, 0, None, b"x") != FULL:  # the frame count is bounded as well
        pass
    assert lane.queued[1] == 50


def test_a_new_address_or_a_seal_opens_a_new_segment_in_order():
    jobs: list = []
    lane = Lane(jobs.append, "m", 1 << 20, 1000)
    pieces = _pieces()
    assert _put(lane, "a", pieces, 0, 0, None, b"1") == NEW
    assert _put(lane, "a", pieces, 0, 0, None, b"2") == 0
    assert _put(lane, "b", pieces, 0, 0, None, b"3") == NEW
    lane.seal()
    assert _put(lane, "b", pieces, 0, 0, None, b"4") == NEW
    assert [j[0] for j in jobs] == ["a", "b", "b"]
    got = [(a, [decode_command(f[4:]).body for f in _frames(d)]) for a, d, _, _ in iter(lane.take, None)]
    assert got == [("a", [b"1", b"2"]), ("b", [b"3"]), ("b", [b"4"])]


class Sink:
    """A broker stand-in: records each connection's frames, answers every request that is not
    oneway (on any connection but the first when ``mute``), and closes the first connection after
    ``close_after`` frames (when set)."""

    def __init__(self, close_after: int | None = None, mute: bool = False):
        self.mute = mute
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.addr = f"127.0.0.1:{self.srv.getsockname()[1]}"
        self.conns: list[list[RemotingCommand]] = []
        self.close_after = close_after
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            got: list[RemotingCommand] = []
            self.conns.append(got)
            threading.Thread(target=self._serve, args=(c, got, len(self.conns) == 1), daemon=True).start()

    def _serve(self, c, got, first):
        try:
            self._serve_until_closed(c, got, first)
        except (ConnectionResetError, BrokenPipeError):
            pass  # a client closed with answers unread (RST): its connection ends, as at EOF

    def _serve_until_closed(self, c, got, first):
        buf = b""
        with c:
            while data := c.recv(1 << 20):
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                    n = 4 + struct.unpack_from(">i", buf)[0]
                    cmd = decode_command(buf[4:n])
                    buf = buf[n:]
                    got.append(cmd)
                    if not cmd.is_oneway and not (first and self.mute):
                        ans = RemotingCommand(code=0, opaque=cmd.opaque, flag=1, ext_fields={
                            "msgId": "7F000001000000000000000000000001", "queueId": "0", "queueOffset": "1"})
                        c.sendall(encode_command(ans))
                    if first and self.close_after is not None and len(got) >= self.close_after:
                        return

    def close(self):
        self.srv.close()


def _producer(sink: Sink, **kw) -> Producer:
    ns = socket.create_server(("127.0.0.1", 0))  # a NameServer nobody asks: the route is set by hand
    p = Producer("pg-lane", f"127.0.0.1:{ns.getsockname()[1]}", local="never", **kw).start()
    p._ns = ns
    p.instance.broker_addrs["sink"] = {0: sink.addr}
    p.instance.publish["T"] = TopicPublishInfo("T", [MessageQueue("T", "sink", 0)])
    return p


def _wait(pred, timeout=10.0):
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline
        time.sleep(0.01)


def test_oneways_leave_in_order_with_the_other_requests_of_the_thread():
    sink = Sink()
    p = _producer(sink, compress_msg_body_over=1 << 20)  # the large body is sent as is
    try:
        want = []
        for i in range(3000):
            body = b"%d" % i
            if i % 500 == 7:
                p.send_oneway(Message("T", body, keys="k"))  # not plain: the general path
            elif i % 500 == 9:
                p.send_async(Message("T", body)).result(5)
            elif i % 1000 == 11:
                body = b"%d" % i + b"." * 70_000  # large: written uncopied, as a command
                p.send_oneway(Message("T", body))
            else:
                p.send_oneway(Message("T", body, tags="A" if i % 2 else None))
            want.append(body)
        _wait(lambda: sink.conns and len(sink.conns[0]) >= len(want))
        assert [c.body for c in sink.conns[0]] == want
        assert p.instance.oneway_lane.queued == (0, 0)
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_a_broken_connection_drops_what_was_in_flight_and_later_sends_go_on_a_new_one():
    sink = Sink(close_after=100)
    p = _producer(sink)
    try:
        deadline = time.monotonic() + 20
        i = 0
        while len(sink.conns) < 2 or not sink.conns[1]:  # never raises: oneway hears nothing
            p.send_oneway(Message("T", b"%d" % i))
            i += 1
            if i % 100 == 0:
                time.sleep(0.01)
            assert time.monotonic() < deadline
        p.send_oneway(Message("T", b"last"))
        _wait(lambda: sink.conns[-1] and sink.conns[-1][-1].body == b"last")
        first, later = sink.conns[0], sink.conns[-1]
        assert len(first) == 100
        bodies = [int(c.body) for c in later[:-1]]
        assert bodies == sorted(bodies) and bodies[0] > 99  # in order, and none twice
        assert p.instance.oneway_lane.queued == (0, 0)
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


@pytest.mark.parametrize("tags", ["a\tb"])
def test_a_message_the_lane_leaves_is_sent_by_the_general_path(tags):
    sink = Sink()
    p = _producer(sink)
    try:
        p.send_oneway(Message("T", b"first"))  # the topic is checked: later plain ones take the lane
        p.send_oneway(Message("T", b"tabbed", tags=tags))
        p.send_oneway(Message("T", b"plain"))
        _wait(lambda: sink.conns and len(sink.conns[0]) >= 3)
        got = sink.conns[0]
        assert [c.body for c in got] == [b"first", b"tabbed", b"plain"]
        assert got[1].ext_fields["i"].startswith("TAGS\x01a\tb\x02UNIQ_KEY\x01")
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_oneways_to_an_address_that_refuses_are_dropped_and_leave_nothing_counted():
    s = socket.create_server(("127.0.0.1", 0))
    dead = f"127.0.0.1:{s.getsockname()[1]}"
    s.close()  # nothing listens there now: every connect is refused
    sink = Sink()
    p = _producer(sink)
    try:
        p.send_oneway(Message("T", b"checked"))  # the topic is checked: the next ones take the lane
        p.instance.broker_addrs["sink"] = {0: dead}
        for i in range(2000):
            p.send_oneway(Message("T", b"%d" % i))  # held for the connect, then failed: no error
        _wait(lambda: p.instance.oneway_lane.queued == (0, 0) and not p.instance._held)
        p.instance.broker_addrs["sink"] = {0: sink.addr}
        p.instance._unreachable.clear()
        p.send_oneway(Message("T", b"again"))
        _wait(lambda: sink.conns and sink.conns[0] and sink.conns[0][-1].body == b"again")
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_two_threads_each_keep_their_order():
    sink = Sink()
    p = _producer(sink)
    try:
        p.send_oneway(Message("T", b"checked"))

        def run(t: int) -> None:
            for i in range(2000):
                if i % 300 == 5:
                    p.send_async(Message("T", b"%d-%d" % (t, i)))  # not waited for: only ordered
                else:
                    p.send_oneway(Message("T", b"%d-%d" % (t, i)))
        threads = [threading.Thread(target=run, args=(t,)) for t in (1, 2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        _wait(lambda: sink.conns and len(sink.conns[0]) >= 4001)
        got = [c.body.split(b"-") for c in sink.conns[0][1:]]
        for t in (b"1", b"2"):
            assert [int(i) for th, i in got if th == t] == list(range(2000))
    finally:
        p.shutdown()
        p._ns.close()
        sink.close()


def test_the_frames_numbers_are_written_as_python_writes_them():
    """sysflag and flag over every length of decimal, both signs and the 64-bit ends (send_frame.h
    sf_put_int, the one C decimal writer of the frames and answers): the template path's frame."""
    import random
    p = Producer("pg", local="never")
    mq = MessageQueue("T", "b", 0)
    lane = Lane([].append, "mark", 1 << 30, 1 << 20)
    t = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, True).template
    rnd = random.Random(5)
    values = [0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, -1, -9, -10, -99, -100, 2**63 - 1, -(2**63) + 1, -(2**63)]
    values += [10 ** k + d for k in range(1, 19) for d in (-1, 0, 1)] + [-(10 ** k) for k in range(1, 19)]
    values += [rnd.randrange(-(2**63), 2**63) for _ in range(300)]
    for v in values:
        assert _put(lane, "127.0.0.1:1", t.pieces, v, -v if v > -(2**63) else v, None, b"x") in (0, NEW)
    frames = _frames(lane.take()[1])
    for raw, v in zip(frames, values, strict=True):
        cmd = decode_command(raw[4:])
        flag = -v if v > -(2**63) else v
        assert (int(cmd.ext_fields["f"]), int(cmd.ext_fields["h"])) == (v, flag)
        req = p._remote(mq, flag, b"x", cmd.ext_fields["i"], v, batch=False, oneway=True)
        req.born_ms = int(cmd.ext_fields["g"])
        assert raw == req.frame(cmd.opaque)


def test_frames_to_many_queues_interleaved_are_each_their_queues_frame():
    """The lane keeps the last header heads of a few queues (send_frame.h sf_write_kept, keyed by
    the template's pieces): frames to 12 queues (more than it keeps) round robin, with flags and
    sysflags that repeat and change, many in one millisecond, are each their own queue's
    template frame byte for byte; a template made anew for a queue (its settings changed) is read
    anew, not the old one's head."""
    import itertools

    from shmq.protocol.command import json_text
    p = Producer("pg", local="never")
    lane = Lane([].append, "mark", 1 << 30, 1 << 20)
    mqs = [MessageQueue("T%d" % (i % 3), "b", i) for i in range(12)]
    tpls = {mq: p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, True).template for mq in mqs}
    sent = []
    for k, (mq, flag, sysflag) in enumerate(zip(itertools.cycle(mqs), [0] * 200 + [1, 2, 0] * 100,
                                                [0] * 400 + [4] * 100)):
        t = tpls[mq]
        if k == 450:  # another queue-number setting: every template made anew
            tpls = {m: p._frames.get(m, p.create_topic_key, 8, False, True).template for m in mqs}
            t = tpls[mq]
        assert _put(lane, "127.0.0.1:1", t.pieces, sysflag, flag, "A" if k % 2 else None, b"x%d" % k) in (0, NEW)
        sent.append((mq, t, flag, sysflag, b"x%d" % k))
    frames = _frames(lane.take()[1])
    for raw, (mq, t, flag, sysflag, body) in zip(frames, sent, strict=True):
        cmd = decode_command(raw[4:])
        assert int(cmd.ext_fields["e"]) == mq.queue_id and cmd.ext_fields["b"] == mq.topic
        assert raw == t.frame(sysflag, int(cmd.ext_fields["g"]), flag, json_text(cmd.ext_fields["i"]), body,
                              cmd.opaque)
