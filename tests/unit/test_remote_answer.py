"""The producer's async answers read in C (native/remote_answer.c) are what the Python path
reads: the C header reader against ``decode_command`` frame by frame (it reads a header exactly
or leaves it to Python), and a client connection with the C hook against one without, fed the
same answers in the same chunks, gives every send the same SendResult or error, once; errors,
answers C does not take, timeouts and a lost connection still reach each pending send once."""
from __future__ import annotations

import asyncio
import struct
import types

import pytest

from shmq.protocol.send_answer import answer_pieces, send_ext
from shmq.client.message import MessageQueue, SendStatus
from shmq.client.remote_send import AsyncSend, answers
from shmq.errors import BrokerError, HeaderDecodeError, RemotingClosed, RemotingTimeout
from shmq.native import _answer
from shmq.protocol import RemotingCommand
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.transport import Connection, Limits

MID = "7F00000100002A9F00000000000004D2"


def raw(header: bytes, body: bytes = b"", stype: int = 0) -> bytes:
    """A frame after its length word (mark | header | body), as decode_command takes it."""
    return struct.pack(">i", (stype << 24) | len(header)) + header + body


def answer(opaque: int, qid: int = 1, offset: int = 1234, code: int = 0, ext=None, remark=None) -> bytes:
    """A broker's answer to a send, encoded by shmq's one encoder (the worker's both paths)."""
    cmd = RemotingCommand(code=310, opaque=opaque).make_response(
        code, remark, send_ext(MID, qid, offset) if ext is None else ext)
    return encode_command(cmd)


HEADERS = [
    # what an Apache broker (fastjson, keys sorted) or shmq writes, and variations of it
    b'{"code":0,"extFields":{"msgId":"AB","queueId":"1","queueOffset":"7","MSG_REGION":"DefaultRegion",'
    b'"TRACE_ON":"true"},"flag":1,"language":"JAVA","opaque":5,"serializeTypeCurrentRPC":"JSON","version":409}',
    b'{"opaque":5,"flag":1,"code":0,"extFields":{"queueOffset":"7","queueId":"1","msgId":"AB"}}',
    b' { "code" : 0 ,\n"flag":1,\t"opaque":-3, "remark":"fine", "extFields":{ } } \r\n',
    b'{"code":0,"flag":1,"opaque":5,"remark":null,"extFields":null}',
    b'{"code":0,"flag":1,"opaque":5}',
    b'{}',
    b'{"code":17,"flag":1,"opaque":9,"remark":"topic not exist","extFields":{}}',
    b'{"code":0,"flag":1,"opaque":5,"extra":true,"more":false,"none":null,"n":12,"s":"x"}',
    b'{"code":0,"code":2,"flag":1,"opaque":5,"extFields":{"a":"1","a":"2"}}',  # the last value counts
    b'{"code":0,"flag":0,"opaque":5,"language":"CPP","version":0}',
    # left to Python: escapes, non-ASCII, values of other types, numbers msgspec reads otherwise
    b'{"code":0,"flag":1,"opaque":5,"remark":"a\\"b"}',
    b'{"code":0,"flag":1,"opaque":5,"remark":"\xc3\xa9"}',
    b'{"code":"0","flag":1,"opaque":5}',
    b'{"code":0,"flag":1,"opaque":5,"extFields":{"queueId":1}}',
    b'{"code":0,"flag":1,"opaque":5.0}',
    b'{"code":0,"flag":1,"opaque":5e0}',
    b'{"code":0,"flag":1,"opaque":05}',
    b'{"code":0,"flag":1,"opaque":12345678901234567890}',
    b'{"code":0,"flag":1,"opaque":5,"nested":{"a":1}}',
    b'{"code":0,"flag":1,"opaque":5,"list":[1]}',
    # not JSON, or not one object: Python raises, C must not read them
    b'{"code":0,"flag":1,"opaque":5} x',
    b'{"code":0,"flag":1,"opaque":5,}',
    b'{"code":0 "flag":1}',
    b'{"code":0,"flag":1,"opaque":5',
    b'{"code":tru,"flag":1}',
    b'[1]',
    b'"x"',
    b'',
]


def py_fields(frame: bytes):
    try:
        c = decode_command(frame)
    except HeaderDecodeError:
        return "error"
    return (c.code, c.opaque, c.flag, c.version, c.language, c.remark, c.ext_fields, c.body)


@pytest.mark.parametrize("header", HEADERS)
@pytest.mark.parametrize("body", [b"", b"BODY"])
def test_the_c_reader_reads_a_header_as_decode_command_or_not_at_all(header, body):
    frame = raw(header, body)
    c = _answer.decode(frame)
    if c is not None:
        assert c == py_fields(frame)
    if HEADERS.index(header) < 10:  # the common forms are read in C
        assert c is not None


ESCAPED = [
    # the escapes the shared scanner (native/remoting_header.h) unescapes when given a scratch
    # buffer, as the worker's send reader (remoting_send.c) gives it; the answers' reader does not
    b'{"code":0,"flag":1,"opaque":5,"remark":"a\\"b\\\\c\\/d\\be\\ff\\ng\\rh\\ti"}',
    b'{"code":0,"flag":1,"opaque":5,"extFields":{"p":"KEYS\\u0001k\\u0002U\\u0001x","q":"\\u00e9\\u20AC"}}',
    b'{"co\\u0064e":0,"flag":1,"opaque":5,"extFields":{"\\u0061":"1"}}',  # an escaped key is its text
    b'{"code":0,"flag":1,"opaque":-0,"extFields":{"z":"1","a":"2","m":"3"}}',  # any member order
    b'{"extFields":{"queueOffset":"7"},"opaque":5}',                         # missing fields: defaults
    # refused: surrogates, unknown or cut escapes, raw non-ASCII, control bytes, too many pairs
    b'{"code":0,"flag":1,"opaque":5,"remark":"\\ud83d\\ude00"}',
    b'{"code":0,"flag":1,"opaque":5,"remark":"\\x41"}',
    b'{"code":0,"flag":1,"opaque":5,"remark":"\\u00G1"}',
    b'{"code":0,"flag":1,"opaque":5,"remark":"\\u00"}',
    b'{"code":0,"flag":1,"opaque":5,"remark":"ab\\',
    b'{"code":0,"flag":1,"opaque":5,"remark":"\\u00e9\xc3\xa9"}',
    b'{"code":0,"flag":1,"opaque":5,"remark":"a\x01b"}',
    b'{"code":0,"flag":1,"opaque":5,"extFields":{%s}}' % b",".join(b'"k%d":"v"' % i for i in range(30)),
]


@pytest.mark.parametrize("escapes", [False, True])
def test_the_shared_scanner_reads_escapes_only_with_a_scratch_and_as_decode_command(escapes):
    for header in HEADERS + ESCAPED:
        frame = raw(header, b"B")
        c = _answer.decode(frame, escapes)
        if c is not None:
            assert c == py_fields(frame), header
        if header in ESCAPED[:5]:  # the first three have escapes
            assert (c is not None) == (escapes or header in ESCAPED[3:5]), header
        if header in ESCAPED[5:]:
            assert c is None, header


@pytest.mark.parametrize("escapes", [False, True])
def test_every_cut_and_damage_of_a_header_is_read_as_decode_command_or_refused(escapes):
    """Truncated and damaged headers (lengths kept consistent): refused, or read exactly; never a
    crash or a read past the frame."""
    import random
    rnd = random.Random(16)
    alphabet = b'0123456789"\\{}[]:,.-+eEu \t\x01\x7f\x80abcdefnlrsu'
    seeds = [HEADERS[0], HEADERS[2], ESCAPED[0], ESCAPED[1], ESCAPED[2]]
    frames = [raw(h[:n]) for h in seeds for n in range(len(h))]
    for _ in range(1500):
        h = bytearray(rnd.choice(seeds))
        for _ in range(rnd.randint(1, 3)):
            at = rnd.randrange(len(h))
            h[at:at + rnd.randint(0, 1)] = bytes([rnd.choice(alphabet)])
        frames.append(raw(bytes(h)))
    read = 0
    for frame in frames:
        c = _answer.decode(frame, escapes)
        if c is not None:
            read += 1
            assert c == py_fields(frame), frame
    assert read > 100



@pytest.mark.parametrize("escapes", [False, True])
def test_long_strings_are_read_as_decode_command_reads_them_or_refused(escapes):
    """The scanner's 16-byte steps (remoting_header.h rh_stop): a value of 0-69 bytes holding one
    byte of each kind at each place (a control byte, 0x7f, non-ASCII, an escape, a lone
    backslash), as a key's value and as a remark, is read exactly or refused; a plain one is read."""
    for n in range(70):
        plain = raw(b'{"code":0,"flag":1,"opaque":5,"remark":"%s","extFields":{"msgId":"%s"}}' % (b"a" * n, b"c" * n))
        assert _answer.decode(plain, escapes) == py_fields(plain)
        for at in range(n):
            for bad in (b"\x01", b"\x1f", b"\x7f", b"\x80", b"\xff", b"\\n", b"\\u0001", b"\\"):
                v = b"a" * at + bad + b"b" * (n - at - 1)
                frame = raw(b'{"code":0,"flag":1,"opaque":5,"remark":"%s","extFields":{"msgId":"%s"}}' % (v, v))
                c = _answer.decode(frame, escapes)
                if c is not None:
                    assert c == py_fields(frame), frame

def test_the_brokers_answers_are_read_in_c_as_in_python():
    for frame in (answer(1), answer(0x7FFFFFFF, 3, 0), answer(77, 0, 10**15), answer(5, code=14, remark="busy"),
                  answer(6, ext={}), answer(7, ext={"msgId": MID, "queueId": "2", "queueOffset": "9",
                                                   "transactionId": "T1"})):
        assert _answer.decode(frame[4:]) == py_fields(frame[4:])
    assert _answer.decode(raw(b'{"code":0}', stype=1)) is None  # the binary header is Python's


class _Transport:
    def __init__(self):
        self.out = []

    def write(self, data) -> None:
        self.out.append(data)

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, key):
        return ("127.0.0.1", 40000)

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...


MQ = MessageQueue("T", "b", 1)
NO_RETRY = types.SimpleNamespace(retry_times_async=0)


def run_answers(fast, chunks: list[bytes], opaques, lose: bool = False, expire=()):
    """Each opaque's outcome (SendResult fields or the error's type and code) and how many times
    its callback ran, after ``chunks`` were read by a client Connection with ``fast``."""
    async def go():
        conn = Connection({}, Limits())
        conn.fast = fast
        conn.connection_made(_Transport())
        calls, futs = {}, {}
        for o in opaques:
            futs[o] = conn._pending[o] = AsyncSend(NO_RETRY, lambda r, o=o: calls.__setitem__(o, calls.get(o, 0) + 1),
                                                   MQ, None, "UNIQ%d" % o if o % 3 else None, 3)
        for c in chunks:
            conn.data_received(c)
        conn.expire(list(expire), 310, 3)
        if lose:
            conn.connection_lost(None)
        out = {}
        for o, f in futs.items():
            if not f.done():
                out[o] = "pending"
            elif f.exception(0) is not None:
                e = f.exception(0)
                out[o] = (type(e).__name__, getattr(e, "code", None))
            else:
                r = f.result(0)
                out[o] = (r.status, r.msg_id, r.offset_msg_id, r.queue, r.queue_offset, r.transaction_id)
        return out, calls, sorted(conn._pending)
    return asyncio.run(go())


@pytest.fixture(params=["template", "scanner"])
def template(request):
    """The broker's SUCCESS answers matched against its template (as bound at import), or every
    answer scanned: both must give what the Python path gives."""
    if request.param == "scanner":
        _answer.bind_template(None)
    yield request.param
    _answer.bind_template(answer_pieces())


def test_c_and_python_give_every_send_the_same_outcome_once(template):
    opaques = list(range(1, 41))
    frames = [answer(o, qid=1, offset=1000 + o) for o in opaques[:30]]
    frames[3] = answer(4, code=14, remark="busy")                       # a refusal: BrokerError
    frames[5] = answer(6, qid=2)                                        # another queue: Python's
    frames[7] = answer(8, ext={"msgId": MID, "queueId": "1", "queueOffset": "9", "transactionId": "T"})
    frames[9] = answer(10, ext={})                                      # no fields: offset -1
    frames[11] = answer(999)                                            # nobody waits for it
    frames[13] = answer(14, ext={"msgId": MID, "queueId": "1", "queueOffset": " 9"})  # int(" 9")
    frames.append(answer(3))                                            # a second answer: dropped
    frames.append(encode_command(RemotingCommand(code=40, opaque=1)))   # a request from the broker
    stream = b"".join(frames)
    for cut in (1, 7, 100, 333, len(stream)):                          # chunks that split frames
        chunks = [stream[i:i + cut] for i in range(0, len(stream), cut)]
        py = run_answers(None, chunks, opaques)
        c = run_answers(answers, chunks, opaques)
        assert c == py
        out, calls, pending = c
        assert set(calls.values()) == {1} and len(calls) == 29   # 30 frames, 12's answer went to 999
        assert out[4] == ("BrokerError", 14) and out[1][0] is SendStatus.SEND_OK
        assert out[1][1:5] == ("UNIQ1", MID, MQ, 1001) and out[3][1] == MID  # no UNIQ_KEY: the msgId
        assert out[6][3] == MessageQueue("T", "b", 2) and out[8][5] == "T" and out[10][4] == -1
        assert pending == [12] + opaques[30:]


def test_a_lost_connection_and_timeouts_reach_each_pending_send_once():
    opaques = list(range(1, 21))
    stream = b"".join(answer(o) for o in opaques[:10])
    for fast in (None, answers):
        out, calls, pending = run_answers(fast, [stream[:-5]], opaques, lose=True, expire=[15, 16])
        assert not pending and set(calls.values()) == {1} and len(calls) == 20
        assert [o for o in opaques if out[o][0] is SendStatus.SEND_OK] == opaques[:9]
        assert {out[o] for o in (15, 16)} == {("RemotingTimeout", RemotingTimeout.code)}
        assert {out[o] for o in opaques[9:] if o not in (15, 16)} == {("RemotingClosed", RemotingClosed.code)}


def test_a_bad_length_after_answers_is_the_decoders_error():
    for fast in (None, answers):
        out, calls, _ = run_answers(fast, [answer(1) + struct.pack(">i", 2) + b"xxxx"], [1, 2], lose=True)
        assert out[1][0] is SendStatus.SEND_OK and out[2] == ("RemotingClosed", RemotingClosed.code)


def test_c_takes_the_success_answers_and_stops_at_the_first_it_does_not():
    async def go():
        conn = Connection({}, Limits())
        conn.connection_made(_Transport())
        futs = [AsyncSend(NO_RETRY, None, MQ, None, "U", 3) for _ in range(4)]
        for o, f in enumerate(futs, 1):
            conn._pending[o] = f
        ok = answer(1) + answer(2) + answer(3)
        data = ok + answer(4, code=14) + answer(5)[:10]
        pos, out, stop = answers(conn, data, 0)
        assert (pos, out, stop) == (len(ok), None, True) and sorted(conn._pending) == [4]
        assert [f.result(0).queue_offset for f in futs[:3]] == [1234] * 3 and not futs[3].done()
        assert answers(conn, answer(5)[:10], 0) == (0, None, False)  # incomplete: the decoder's
    asyncio.run(go())


class _Req:
    def __init__(self, tag: bytes, bad: bool = False):
        self.tag, self.bad = tag, bad

    def frame(self, opaque: int) -> bytes:
        if self.bad:
            raise ValueError("header too long")
        return b"%s:%d;" % (self.tag, opaque)


def test_a_run_of_async_sends_is_started_in_order_and_a_bad_frame_fails_only_its_own():
    async def go():
        conn = Connection({}, Limits())
        t = _Transport()
        conn.connection_made(t)
        conn._next_opaque = 0x7FFFFFFE  # the numbering wraps as _new_opaque's
        jobs = [("a", _Req(b"x"), "w1", 3), ("a", _Req(b"y", bad=True), "w2", 3), ("a", _Req(b"z"), "w3", 3)]
        started = conn.start_frames(jobs)
        assert started[0] == 0x7FFFFFFF and isinstance(started[1], ValueError) and started[2] == 2
        assert conn._pending == {0x7FFFFFFF: "w1", 2: "w3"}
        await asyncio.sleep(0)  # the flush of this loop turn
        assert t.out == [b"x:2147483647;z:2;"]
        conn.closed = True
        assert conn.start_frames(jobs) is None
    asyncio.run(go())


def test_a_future_a_thread_waits_on_is_completed_in_c_and_wakes_it():
    """No callback: C sets the value and state itself (SendFuture's order) and then the waiting
    thread's Event; with a callback it calls SendFuture.set_result, which runs it once."""
    import threading
    import time

    async def go():
        conn = Connection({}, Limits())
        conn.connection_made(_Transport())
        calls = []
        futs = [AsyncSend(NO_RETRY, None, MQ, None, "U1", 3), AsyncSend(NO_RETRY, calls.append, MQ, None, None, 3)]
        for o, f in enumerate(futs, 1):
            conn._pending[o] = f
        got = []
        t = threading.Thread(target=lambda: got.append(futs[0].result(10)))
        t.start()
        while futs[0]._event is None:
            time.sleep(0.001)
        data = answer(1, offset=7) + answer(2, offset=8)
        assert answers(conn, data, 0) == (len(data), None, False) and not conn._pending
        t.join(10)
        assert got[0].queue_offset == 7 and got[0].msg_id == "U1" and futs[0].done()
        assert calls == [futs[1].result(0)] and calls[0].msg_id == MID  # no UNIQ_KEY: the msgId
        assert answers(conn, answer(1), 0)[2] is True  # a second answer: nobody waits, Python's
    asyncio.run(go())


def _template_frames() -> list[bytes]:
    """The broker's own answers (some values at their limits) and damaged copies of them."""
    import random
    rnd = random.Random(61)
    good = [answer(o, q, off) for o, q, off in ((1, 1, 1234), (-1, 0, 0), (-0x7FFFFFFF, 3, 10**17), (0, 15, 5),
                                                 (10**17, 2, -1), (-(10**17), 2, 7))]
    good += [encode_command(RemotingCommand(code=310, opaque=9).make_response(0, None, send_ext(mid, 1, 2)))
             for mid in ("", "x y", "a'b", "\x7f", "é", 'q"', "a\\b", "\x01")]
    frames = [f[4:] for f in good]
    alphabet = b'0123456789"\\{}[]:,.-+eE \t\x01\x7f\x80ABCDEFabcdefnlrsu'
    seed = answer(5, 1, 77)[4:]
    for _ in range(3000):
        h = bytearray(seed[4:])
        for _ in range(rnd.randint(1, 2)):
            at = rnd.randrange(len(h))
            h[at:at + rnd.randint(0, 1)] = bytes([rnd.choice(alphabet)]) * rnd.randint(0, 2)
        frames.append(raw(bytes(h)))
    frames += [seed[:n] for n in range(len(seed))] + [raw(seed[4:], b"BODY"), raw(seed[4:], stype=1)]
    return frames


def test_the_template_reads_an_answer_as_the_scanner_and_decode_command_do():
    """What match() reads of a frame (the broker's answer, matched against answer_pieces) is what
    the scanner and decode_command read of it: a SUCCESS response with those three fields and
    that opaque; whatever does not match exactly is scanned as before."""
    matched = 0
    for frame in _template_frames():
        m = _answer.match(frame)
        if m is None:
            continue
        matched += 1
        py = py_fields(frame)
        assert py != "error" and _answer.decode(frame) == py, frame
        code, opaque, flag, _, _, _, ext, body = py
        assert (code, flag & 1, body, opaque) == (0, 1, b"", m[0])
        assert (ext["msgId"], ext["queueId"], ext["queueOffset"]) == m[1:]
        assert ext == send_ext(*m[1:2], 0, 0) | {"queueId": m[2], "queueOffset": m[3]}
    assert matched > 50


def test_pieces_the_scanner_does_not_read_as_a_success_answer_are_refused():
    p = answer_pieces()
    bad = [
        (p[0].replace(b'"code":0', b'"code":1'),) + p[1:],                     # not SUCCESS
        (p[0].replace(b'"code":0', b'"code":0,"queueId":"3"'),) + p[1:],       # (a top-level key: harmless)
        (p[0], p[1] + b'3","queueId":"', p[2], p[3], p[4]),                    # queueId twice: the slot loses
        (p[0][:-1], p[1], p[2], p[3], p[4]),                                  # msgId no longer a string
        (p[0], p[1], p[2], p[3], b',"opaque":1' + p[4]),                       # the slot's opaque overwritten
        (p[0], p[1], p[2], b'","transactionId":"T' + p[3], p[4]),               # a field send_result reads
        (p[0], p[1], p[2], p[3], p[4][:-1] + b',"flag":0}'),                   # not a response
        p[:4],
    ]
    refused = 0
    for pieces in bad:
        try:
            _answer.bind_template(pieces)
        except (ValueError, TypeError):
            refused += 1
        finally:
            _answer.bind_template(p)
    assert refused == len(bad) - 1  # all but the harmless extra top-level key
    with pytest.raises(ValueError):
        _answer.bind_template(bad[0])
    assert _answer.match(answer(3)[4:]) == (3, MID, "1", "1234")  # the binding before is kept


def test_the_c_answers_sendresult_is_the_python_paths_in_every_view():
    """The C answer's SendResult keeps the offset msgId and the queue offset raw until read
    (hot_result.c result_tcp): read, compared, printed, pickled, set or deleted, it is the
    SendResult the Python path makes (the msgId of another length than 32, and a send with no
    UNIQ_KEY, included)."""
    import copy
    import pickle

    from shmq.client.message import SendResult
    other = "7F0000010000"  # a msgId of another length: made a str at once
    frames = [answer(1, offset=1001), answer(2, offset=2**40), answer(3, ext=send_ext(other, 1, 7)), answer(6)]
    for attr in (None, "msg_id", "offset_msg_id", "queue_offset"):
        async def go():
            conn = Connection({}, Limits())
            conn.fast = answers
            conn.connection_made(_Transport())
            futs = {o: AsyncSend(NO_RETRY, None, MQ, None, "UNIQ%d" % o if o % 3 else "", 3) for o in (1, 2, 3, 6)}
            conn._pending.update(futs)
            conn.data_received(b"".join(frames))
            return {o: f.result(0) for o, f in futs.items()}
        got = asyncio.run(go())
        for o, off, mid in ((1, 1001, MID), (2, 2**40, MID), (3, 7, other), (6, 1234, MID)):
            r, py = got[o], SendResult(SendStatus.SEND_OK, "UNIQ%d" % o if o % 3 else mid, mid, MQ, off)
            if attr is not None:
                getattr(r, attr)  # one field read first: the others still raw
            assert r == py and repr(r) == repr(py)
            assert (r.msg_id, r.offset_msg_id, r.queue_offset, r.queue_id) == (py.msg_id, mid, off, 1)
            assert pickle.loads(pickle.dumps(r)) == py and copy.copy(r) == py
        r = got[1]
        r.offset_msg_id = "X"
        assert r.offset_msg_id == "X" and r != got[2]
        del got[2].queue_offset
        with pytest.raises(AttributeError):
            got[2].queue_offset


def test_a_template_answers_fields_are_read_as_the_python_path_reads_them(template):
    """An answer matched against the template has its three fields read by position (send_answer.h
    success_fields, no key compared): a queueId other than the queue asked, or a queueId or
    queueOffset that is not an integer the scanner reads, leaves it to the Python path, and each
    send's outcome is the Python path's."""
    p = answer_pieces()
    cases = [("1", "9"), ("01", "9"), ("2", "9"), ("-1", "9"), ("x", "9"), ("", "9"), ("1", "-1"), ("1", "x"),
             ("1", ""), ("1", "12345678901234567"), ("1", "1234567890123456789"), ("1", "+3"), ("1", "00")]
    frames = []
    for o, (qid, off) in enumerate(cases, 1):
        head = p[0] + MID.encode() + p[1] + qid.encode() + p[2] + off.encode() + p[3] + b"%d" % o + p[4]
        frames.append(struct.pack(">ii", 4 + len(head), len(head)) + head)
        assert template == "scanner" or _answer.match(frames[-1][4:]) is not None  # each one the template's
    opaques = list(range(1, len(cases) + 1))
    stream = b"".join(frames)
    py = run_answers(None, [stream], opaques)
    assert run_answers(answers, [stream], opaques) == py
    out = py[0]
    assert out[1][4] == 9 and out[2][4] == 9 and out[3][3] == MessageQueue("T", "b", 2)


def test_a_callback_run_by_the_c_answer_is_run_once_and_its_error_only_logged(caplog):
    """The C answer runs the send's callback itself (remote_answer.c resolve_future) as
    SendFuture._finish does: once, with the SendResult, after the value is set; an Exception it
    raises is logged and the send keeps its result; a function it adds with add_done_callback
    runs once; a send whose add_done_callback list existed before is completed by the Python
    path, the same."""
    seen, added = [], []

    def boom(r):
        seen.append(("boom", r.queue_offset))
        raise ValueError("the caller's bug")

    def adds(r):
        seen.append(("adds", r.queue_offset))
        futs[2].add_done_callback(lambda f: added.append(f.result().queue_offset))

    async def go():
        conn = Connection({}, Limits())
        conn.fast = answers
        conn.connection_made(_Transport())
        for o, cb in ((1, boom), (2, adds), (3, lambda r: seen.append(("pre", r.queue_offset)))):
            futs[o] = conn._pending[o] = AsyncSend(NO_RETRY, cb, MQ, None, "U%d" % o, 3)
        futs[3].add_done_callback(lambda f: added.append(-f.result().queue_offset))
        conn.data_received(b"".join(answer(o, qid=1, offset=100 + o) for o in (1, 2, 3)))
        return sorted(conn._pending)

    futs: dict = {}
    with caplog.at_level("ERROR", logger="shmq.client"):
        assert asyncio.run(go()) == []
    assert seen == [("boom", 101), ("adds", 102), ("pre", 103)] and added == [102, -103]
    assert [futs[o].result(0).queue_offset for o in (1, 2, 3)] == [101, 102, 103]
    errs = [r for r in caplog.records if "send callback" in r.getMessage()]
    assert len(errs) == 1 and errs[0].exc_info[0] is ValueError
