"""A sync send over TCP in one C call (client/sync_send.py, native/sync_send.c): its frame is byte
for byte the template path's (RemoteSend.frame, itself the generic encoder's), a SUCCESS answer
becomes the SendResult send_result makes of it, every answer the C reader does not take comes
back as the bytes read (and the Python path then gives the same result or error), a request
from the server before the answer is skipped, and a silent or closing server is an error, not a
hang or a crash."""
from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from shmq.client import sync_send
from shmq.client.message import MessageQueue, SendResult
from shmq.client.producer import _TAGS_END, _TAGS_HEAD, _UNIQ_HEAD, Producer
from shmq.client.remote_send import RemoteSend, send_result
from shmq.errors import BrokerError
from shmq.native import _sync
from shmq.protocol import RemotingCommand, RequestCode
from shmq.protocol.codes import FLAG_RESPONSE
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.frame import FrameDecoder

TAGS = [None, "TagA", 'q"\\b', "ünï 中", "%d%%s"]
MQ = MessageQueue("T%d", "b", 3)


def _target(batch: bool):
    p = Producer("pg%dgrp", local="never")  # a % in the group and the topic: the template escapes them
    return p._frames.get(MQ, p.create_topic_key, p.default_queue_nums, batch, False)


def _ok(req: RemotingCommand, **ext) -> bytes:
    fields = {"msgId": "7F0000010000ABCD", "queueId": "3", "queueOffset": "41"}
    fields.update(ext)
    return encode_command(RemotingCommand(code=0, opaque=req.opaque, flag=FLAG_RESPONSE,
                                          ext_fields={k: v for k, v in fields.items() if v is not None}))


def _exchange(answer, *, tags=None, body=b"x" * 100, uniq=None, flag=0, batch=False, timeout=5.0, spin=0.0,
              block=0.0):
    """One _sync.call over a socket pair whose server end answers ``answer(request)`` (bytes, or
    None to stay silent, or "close"). Returns (call's result, the request's frame, what was answered).
    ``block`` > 0: the client end's SO_RCVTIMEO (as SyncRemotingClient.block leaves it), and the
    call sleeps in its recv."""
    cli, srv = socket.socketpair()
    if block:
        cli.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(block), int(block % 1 * 1e6)))
    got: dict = {}

    def serve():
        dec = FrameDecoder(1 << 20)
        frames: list = []
        while not frames:
            data = srv.recv(65536)
            if not data:
                return
            frames = dec.feed(data)
        got["frame"] = frames[0]
        out = answer(decode_command(frames[0]))
        if out == "close":
            srv.close()
        elif out is not None:
            got["sent"] = out
            srv.sendall(out)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        r = _sync.call(cli, _target(batch).template.pieces, 0, flag, tags, body, uniq, 77, timeout, spin, MQ, block)
    finally:
        t.join(5)
        cli.close()
        srv.close()
    return r, got.get("frame"), got.get("sent")


@pytest.mark.parametrize("tags", TAGS)
def test_the_frame_is_the_template_frame_and_the_answer_the_send_result(tags):
    r, frame, sent = _exchange(_ok, tags=tags, flag=5)
    assert r.__class__ is SendResult
    ext = decode_command(frame).ext_fields
    uniq = r.msg_id
    text = (_TAGS_HEAD + tags + _TAGS_END if tags else _UNIQ_HEAD) + uniq
    want = RemoteSend(_target(False), 0, int(ext["g"]), 5, text, b"x" * 100).frame(77)
    assert frame == want[4:]  # the frame decoder strips the length word
    assert repr(r) == repr(send_result(decode_command(sent[4:]), MQ, uniq))


def test_a_batch_frame_and_its_result():
    ids = "A" * 32 + "," + "B" * 32
    r, frame, sent = _exchange(_ok, body=b"batch-body", uniq=ids, batch=True)
    ext = decode_command(frame).ext_fields
    assert frame == RemoteSend(_target(True), 0, int(ext["g"]), 0, "", b"batch-body").frame(77)[4:]
    assert repr(r) == repr(send_result(decode_command(sent[4:]), MQ, ids))


def _refusal(req):
    return encode_command(RemotingCommand(code=17, opaque=req.opaque, flag=FLAG_RESPONSE, remark="no topic"))


def _trailing(req):  # a request from the server after the answer: the decoder's to keep
    return _ok(req) + encode_command(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=5))


@pytest.mark.parametrize("answer", [
    _refusal, _trailing,
    lambda req: _ok(req, transactionId="tx1"),
    lambda req: _ok(req, queueId="2"),  # another queue than asked: send_result makes its own mq
    lambda req: _ok(req, msgId='a"b'),  # an escaped string
    lambda req: encode_command(RemotingCommand(code=0, opaque=req.opaque, flag=FLAG_RESPONSE, body=b"?",
                                               ext_fields={"msgId": "m", "queueId": "3", "queueOffset": "1"})),
])
def test_answers_the_reader_does_not_take_come_back_as_the_bytes_read(answer):
    r, _, sent = _exchange(answer)
    assert r.__class__ is tuple
    uniq, data = r
    assert data == sent and len(uniq) == 32
    frames = FrameDecoder(1 << 20).feed(data)
    resp = next(c for c in map(decode_command, frames) if c.flag & FLAG_RESPONSE and c.opaque == 77)
    if resp.code:
        with pytest.raises(BrokerError):
            send_result(resp, MQ, uniq)


def test_a_server_request_before_the_answer_is_skipped():
    def answer(req):
        return encode_command(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=9)) + _ok(req)
    r, _, _ = _exchange(answer)
    assert r.__class__ is SendResult and r.queue_offset == 41


@pytest.mark.parametrize("spin", [0.0, 0.02])
def test_silence_is_a_timeout_and_a_close_an_error(spin):
    with pytest.raises(TimeoutError):
        _exchange(lambda req: None, timeout=0.2, spin=spin)
    with pytest.raises(ConnectionResetError):
        _exchange(lambda req: "close", spin=spin)


@pytest.mark.parametrize("spin", [0.0, 0.02])
def test_asleep_in_the_recv_the_answer_is_read_and_the_deadline_kept(spin):
    r, _, sent = _exchange(_ok, block=5.0, spin=spin)
    assert repr(r) == repr(send_result(decode_command(sent[4:]), MQ, r.msg_id))
    with pytest.raises(TimeoutError):  # SO_RCVTIMEO ends the recv, then the deadline's poll
        _exchange(lambda req: None, timeout=0.2, block=0.2, spin=spin)
    t0 = time.monotonic()
    with pytest.raises(TimeoutError):  # a deadline sooner than SO_RCVTIMEO: not asleep in the recv
        _exchange(lambda req: None, timeout=0.2, block=30.0, spin=spin)
    assert time.monotonic() - t0 < 20
    with pytest.raises(ConnectionResetError):
        _exchange(lambda req: "close", block=5.0, spin=spin)


def test_bad_arguments_raise_and_send_nothing():
    cli, srv = socket.socketpair()
    try:
        pieces = _target(False).template.pieces
        with pytest.raises(TypeError):
            _sync.call(cli, pieces[:5], 0, 0, None, b"x", None, 1, 1.0, 0.0, MQ)
        with pytest.raises(TypeError):
            _sync.call(cli, pieces, 0, 0, None, "not bytes", None, 1, 1.0, 0.0, MQ)
        assert _sync.call(cli, pieces, 0, 0, "a\x01b", b"x", None, 1, 1.0, 0.0, MQ) == sync_send.UNSUPPORTED
        srv.setblocking(False)
        with pytest.raises(BlockingIOError):
            srv.recv(1)  # nothing was written
    finally:
        cli.close()
        srv.close()


def test_a_large_body_and_a_large_frame_before_the_answer():
    """A 300 KB body (the frame built off the stack, written in pieces as the peer reads) and a
    40 KB server request ahead of the answer (more than the C read buffer): the bytes read come
    back, and the client's decoder and Python path find the answer after them."""
    from shmq.protocol.client import SyncRemotingClient
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    body = bytes(range(256)) * 1200

    def serve():
        s, _ = ls.accept()
        with s:
            dec, frames = FrameDecoder(1 << 22), []
            while not frames:
                frames = dec.feed(s.recv(1 << 16))
            req = decode_command(frames[0])
            assert req.body == body
            big = encode_command(RemotingCommand(code=RequestCode.HEART_BEAT, opaque=3, body=b"h" * 40_000))
            s.sendall(big + _ok(req))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    c = SyncRemotingClient(f"127.0.0.1:{ls.getsockname()[1]}", timeout=5)
    try:
        r = _sync.call(c.sock, _target(False).template.pieces, 0, 0, None, body, None, 77, 5.0, 0.0, MQ)
        assert r.__class__ is tuple
        c.feed(r[1])
        resp = c.response(77, 5)
        assert resp.code == 0 and send_result(resp, MQ, r[0]).queue_offset == 41
    finally:
        c.close()
        ls.close()
        t.join(5)


def _own(msg_id: bytes, qid: bytes = b"3", qoff: bytes = b"41", opaque: bytes = b"77"):
    """This broker's SUCCESS answer as its C path writes it: answer_pieces around the values."""
    from shmq.protocol.send_answer import answer_pieces
    p = answer_pieces()
    h = p[0] + msg_id + p[1] + qid + p[2] + qoff + p[3] + opaque + p[4]
    return lambda req: struct.pack(">II", 4 + len(h), len(h)) + h


@pytest.mark.parametrize("answer", [
    _own(b"7F0000010000ABCD"), _own(b",".join(b"7F00000100002A9F%016X" % k for k in range(32))),
    _own(b"7F0000010000ABCD", qid=b"2"), _own(b"a\\\"b"), _own(b"x\x01y"), _own(b"M", opaque=b"077"),
    _own(b"M", qoff=b"-1"), _own(b"M", qoff=b"12345678901234567890"),
])
def test_the_brokers_own_answer_is_read_by_its_template_as_the_scanner_reads_it(answer):
    """sync_send binds answer_pieces (send_answer.h's sa_template): a match is read without the
    scan, and gives what the scanner gives (and send_result after it) for every answer."""
    from shmq.protocol.send_answer import answer_pieces
    try:
        _sync.bind_template(None)
        scanned = _exchange(answer, uniq="U" * 32)
        _sync.bind_template(answer_pieces())
        matched = _exchange(answer, uniq="U" * 32)
    finally:
        _sync.bind_template(answer_pieces())
    assert repr(matched[0]) == repr(scanned[0])
    if matched[0].__class__ is SendResult:
        assert repr(matched[0]) == repr(send_result(decode_command(matched[2][4:]), MQ, "U" * 32))


def test_a_setting_changed_drops_the_batch_templates_cached():
    """send_batch_plain's cached batch templates (Producer._batch_routes) are made with the
    producer's settings (create_topic_key, ...): set any attribute and they are made anew, as
    the LaneState is."""
    p = Producer("pg-cache", local="never")
    p._batch_routes["T"] = ("info", [])
    p.create_topic_key = "OtherKey"
    assert p._batch_routes == {} and p._lane_state is None


def test_turn_draws_the_opaque_only_on_a_connection_with_nothing_read_ahead():
    """``SyncRemotingClient.turn`` (what a C sync send asks before it writes): the next opaque as
    ``_next_opaque`` draws it (wrapping past 2**31-1 to 1), or 0 with none drawn while a frame
    or part of one read from the socket is not yet taken."""
    from shmq.protocol.client import SyncRemotingClient
    srv = socket.create_server(("127.0.0.1", 0))
    try:
        c = SyncRemotingClient(f"127.0.0.1:{srv.getsockname()[1]}", timeout=1.0)
        try:
            assert [c.turn(), c.turn(), c._next_opaque(), c.turn()] == [1, 2, 3, 4]
            c._opaque = 0x7FFFFFFF
            assert c.turn() == 1
            whole = encode_command(RemotingCommand(code=0, flag=FLAG_RESPONSE, opaque=1))
            c.feed(whole[:5])  # part of a frame: the next bytes are not a new frame's
            assert c.turn() == 0 and c._opaque == 1
            c.feed(whole[5:])  # a whole frame read and not taken
            assert c.turn() == 0 and c._opaque == 1
            c.response(1, 1.0)
            assert c.turn() == 2
        finally:
            c.close()
    finally:
        srv.close()
