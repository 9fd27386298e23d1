"""The frame of an async or oneway send (client.remote_send.RemoteSend: the producer's template
for the queue, protocol.headers.SendFrame, with this send's values put in) is byte for byte
what the generic encoder (RemotingCommand + encode_command) writes for the same send, for every
shape of message, and bad input is refused with the same error as before, nothing sent."""
import pytest

from shmq.client.message import Message, MessageQueue
from shmq.client.producer import Producer
from shmq.errors import InvalidMessage, InvalidTopic, MessageTooLarge
from shmq.protocol.codes import FLAG_ONEWAY
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.headers import SendFrame

MESSAGES = [
    Message("T", b"x"),
    Message("T", b"x" * 100, tags="TagA"),
    Message("T", b"body", tags="A", keys=["k1", "k2"], properties={"u": "1", "v": "two"}),
    Message("T", "ünïcødé 中文 \"quoted\" \\ back".encode(), tags="标签", keys="ключ",
            properties={"名": "值\t\n\r\x7f", "q": '"', "%s": "%d%%"}),
    Message("T", b"d", delay_level=3, flag=7),
    Message("T", b"z" * 10_000),  # compressed on the wire (sysflag 1)
    Message("T", b"m" * (4 * 1024 * 1024)),  # the largest body
    Message("T", b"t", deliver_at=1_900_000_000_000),
    Message("T", b"p", tags='q"\\ü中\t', flag=5),  # plain (no dict built), escaped by the JSON encoder
]


def _old_frame(p: Producer, mq, msg, body, props, sysflag, opaque, oneway, born_ms) -> bytes:
    """The generic encoding of the same send (the same born time)."""
    cmd = p._send_request(mq, msg, body, props, sysflag, batch=False)
    cmd.ext_fields["g"] = str(born_ms)
    cmd.opaque = opaque
    if oneway:
        cmd.flag |= FLAG_ONEWAY
    return encode_command(cmd)


@pytest.mark.parametrize("oneway", [False, True])
@pytest.mark.parametrize("k", range(len(MESSAGES)))
def test_frame_is_the_generic_encoding(k, oneway):
    p = Producer("pg%grp", local="never")  # a % in the group: the template escapes it
    mq = MessageQueue("T", "b", 3)
    msg = MESSAGES[k]
    body, props, sysflag = p._prepare(msg)
    for _ in range(2):  # the first: _prepare's way, the second: a plain message's (topic checked)
        w_body, text, w_sysflag, uniq = p._wire(msg)
        assert (w_body, w_sysflag) == (body, sysflag)
        props["UNIQ_KEY"] = uniq
        req = p._remote(mq, msg.flag, body, text, sysflag, batch=False, oneway=oneway)
        assert req.template is not None
        _check_frames(p, mq, msg, body, props, sysflag, oneway, req)


def _check_frames(p, mq, msg, body, props, sysflag, oneway, req):
    for opaque in (1, 99, 2**31 - 1):
        got = req.frame(opaque)
        assert got == _old_frame(p, mq, msg, body, props, sysflag, opaque, oneway, req.born_ms)
        cmd = decode_command(got[4:])
        assert cmd.opaque == opaque and cmd.body == body and cmd.ext_fields["i"] == req.properties


def test_batch_frame_is_the_generic_encoding():
    p = Producer("pg", local="never")
    mq = MessageQueue("T", "b", 0)
    batch, _ = p._batch_body([Message("T", b"a%d" % i, tags="A") for i in range(32)])
    req = p._remote(mq, 0, batch, "", 0, batch=True, oneway=False)
    cmd = p._send_request(mq, Message("T", b"-"), batch, {}, 0, batch=True)
    cmd.ext_fields["g"] = str(req.born_ms)
    cmd.opaque = 5
    assert req.frame(5) == encode_command(cmd)


def test_a_name_holding_a_stand_in_takes_the_generic_encoding():
    assert SendFrame.of("-9100000000000000002", "T", "TBW102", 4, 0, batch=False, oneway=False) is None
    p = Producer("-9100000000000000001", local="never")
    mq = MessageQueue("T", "b", 0)
    msg = Message("T", b"x")
    body, text, sysflag, _ = p._wire(msg)
    req = p._remote(mq, 0, body, text, sysflag, batch=False, oneway=False)
    assert req.template is None
    cmd = req.command()
    cmd.opaque = 8
    assert req.frame(8) == encode_command(cmd)


def test_bad_input_raises_the_same_error_before_any_frame():
    p = Producer("pg", local="never")  # not started: nothing could be sent
    for msg, err in ((Message("bad topic", b"x"), InvalidTopic), (Message("T", b""), InvalidMessage),
                     (Message("T", b"x" * (4 * 1024 * 1024 + 1)), MessageTooLarge),
                     (Message("T", b"x", tags="A\x01"), InvalidMessage),
                     (Message("T", b"x", properties={"u": "a\x02b"}), InvalidMessage)):
        with pytest.raises(err):
            p.send_oneway(msg)
        assert isinstance(p.send_async(msg).exception(1), err)


@pytest.mark.parametrize("topic", ["T", "t%d%%", "ü中\"q\\", "-9100000000000000005"])
@pytest.mark.parametrize("batch,oneway", [(False, False), (False, True), (True, False)])
def test_each_queues_template_is_the_one_encoded_for_it(topic, batch, oneway):
    """A queue's template, made from its topic's (the queue id written into the topic's
    template), is byte for byte the one encoded for that queue afresh; a name holding the
    stand-in queue id takes the encoding for each queue."""
    for qid in (0, 1, 7, 15, 1023, 2**31 - 1, -1):
        got = SendFrame.of("pg%grp", topic, "TBW102", 4, qid, batch=batch, oneway=oneway)
        fresh = SendFrame._made("pg%grp", topic, "TBW102", 4, str(qid), batch, oneway)
        assert (got.template, got.pieces, got.code) == (fresh.template, fresh.pieces, fresh.code)
        assert b'"e":"%d"' % qid in got.template
