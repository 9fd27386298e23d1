"""What the producer puts on the wire. A SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE header holds the
strings Java's SendMessageRequestHeaderV2 sends. A TCP send_batch's body: a uniform list of plain messages is checked and encoded by the C
batch encoder (hot_encode_batch, the encoder the local batch appends through) into exactly the
MessageBatch bytes the Python encoder writes for the same messages and ids; any other list takes
the Python path, which raises the precise error."""
import pytest

from shmq.client.message import Message
from shmq.client.producer import Producer
from shmq.client.sync_send import _UNIQ_ADDR
from shmq.errors import InvalidMessage, InvalidTopic, MessageTooLarge
from shmq.message.batch import decode_batch, encode_batch
from shmq.native import hot_encode_batch


def _python_body(msgs, ids: list[str]) -> bytes:
    entries = []
    for m, i in zip(msgs, ids):
        props = (f"TAGS\x01{m.tags}\x02" if m.tags else "") + f"UNIQ_KEY\x01{i}"
        entries.append((m.body, props.encode(), 0))
    return encode_batch(entries)


@pytest.mark.parametrize("tags", [None, "TagA"])
def test_c_encoding_is_the_python_encoding(tags):
    msgs = [Message("T", b"body-%d" % k * (k + 1), tags=tags) for k in range(7)]
    head = f"TAGS\x01{tags}\x02".encode() if tags else b""
    body, raw_ids = hot_encode_batch(_UNIQ_ADDR, msgs, head, 4096)
    ids = [raw_ids[i:i + 32].decode() for i in range(0, len(raw_ids), 32)]
    assert len(set(ids)) == 7 and all(len(i) == 32 for i in ids)
    assert body == _python_body(msgs, ids)
    assert [e.body for e in decode_batch(body)] == [m.body for m in msgs]


def test_lists_it_does_not_take_are_none():
    msgs = [Message("T", b"x", tags="A") for _ in range(3)]
    head = b"TAGS\x01A\x02"

    class Sub(Message):
        __slots__ = ()
    for bad in ([*msgs, Message("T", b"x", tags="B")], [*msgs, Message("U", b"x", tags="A")],
                [*msgs, Message("T", b"x", tags="A", keys="k")], [*msgs, Message("T", b"", tags="A")],
                [*msgs, Message("T", b"x" * 5000, tags="A")], [*msgs, Sub("T", b"x", tags="A")],
                [*msgs, Message("T", b"x", tags="A", properties={"p": "1"})]):
        assert hot_encode_batch(_UNIQ_ADDR, bad, head, 4096) is None


def test_producer_batch_body_fast_and_general_paths():
    p = Producer("pg", local="never")  # not started: _batch_body needs no broker
    body, ids = p._batch_body([Message("T", b"a", tags="A"), Message("T", b"b", tags="A")])
    assert ids.__class__ is bytes and len(ids) == 64
    # keys: the Python path, the same layout, ids comma-joined
    body2, ids2 = p._batch_body([Message("T", b"a", keys="k1"), Message("T", b"b")])
    assert [e.body for e in decode_batch(body2)] == [b"a", b"b"] and len(ids2.split(",")) == 2
    with pytest.raises(InvalidMessage, match="same"):
        p._batch_body([Message("T", b"a"), Message("U", b"b")])
    with pytest.raises(InvalidTopic):
        p._batch_body([Message("bad topic", b"a"), Message("bad topic", b"b")])
    with pytest.raises(InvalidMessage, match="retry"):
        p._batch_body([Message("%RETRY%G", b"a")])
    with pytest.raises(MessageTooLarge):
        p._batch_body([Message("T", b"y" * 1_000_000) for _ in range(5)])


@pytest.mark.parametrize("batch", [False, True])
def test_send_header_is_the_generic_encoding(batch):
    from shmq.client.message import MessageQueue
    from shmq.protocol import RequestCode, request
    p = Producer("pg", local="never")
    m = Message("T", b"x", tags="A", flag=3)
    body, props, sysflag = p._prepare(m)
    cmd = p._send_request(MessageQueue("T", "b", 2), m, body, props, sysflag, batch=batch)
    ref = request(RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2, body=body, a="pg", b="T",
                  c=p.create_topic_key, d=p.default_queue_nums, e=2, f=sysflag, g=cmd.ext_fields["g"], h=3,
                  i=f"TAGS\x01A\x02UNIQ_KEY\x01{props['UNIQ_KEY']}", j=0, k=False, m=batch)
    assert (cmd.code, cmd.ext_fields, cmd.body) == (ref.code, ref.ext_fields, ref.body)
    assert abs(int(cmd.ext_fields["g"]) - __import__("time").time() * 1000) < 60_000


def test_uniq_ids_drawn_in_blocks_stay_unique():
    from shmq.client.uniq_id import generator, new_uniq_id
    ids = [new_uniq_id() for _ in range(5000)] + generator().many(100) + [new_uniq_id() for _ in range(100)]
    assert len(set(ids)) == len(ids) and all(len(i) == 32 for i in ids)
