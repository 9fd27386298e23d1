"""A TCP pull's body decoded in one C call (shmq.native.hot_records, the local walk's decode)
gives the same MessageExt, field by field, as the one Python decoder (message_from_view), and
hands every body it does not take whole back to it: a compressed record, a retry topic (whose
messages show their original topic), another topic's record, a body that is not records."""
import zlib

import pytest

from shmq.client.message import message_from_view, messages_from_records
from shmq.errors import StoreCorrupt
from shmq.message.layout import FLAG_COMPRESSED, R_MAGIC
from shmq.native import hot_records
from shmq.store import MessageStore

from ..conftest import small_config
from .test_local_read import _records

FIELDS = ("topic", "body", "tags", "keys", "properties", "msg_id", "offset_msg_id", "queue_id", "queue_offset",
          "reconsume_times", "born_host", "store_host", "flag", "sysflag", "born_timestamp", "store_timestamp",
          "commit_log_offset", "broker_name")


def _body(store, topic):
    return b"".join(bytes(v) for v in store.get_messages(topic, 0, 0, 32, max_bytes=1 << 30).messages)


def _python(body, broker):
    out, pos = [], 0
    mv = memoryview(body)
    while pos < len(body):
        out.append(message_from_view(mv, pos, broker))
        pos += int.from_bytes(body[pos:pos + 4], "big")
    return out


def _fields(msgs):
    return [tuple(getattr(m, f) for f in FIELDS) for m in msgs]


def test_the_c_decode_of_a_pulled_body_equals_the_one_decoder_field_by_field(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        _records(store)
        body = _body(store, "T")
        got = hot_records(body, "T", "b1")
        want = _python(body, "b1")
        assert len(got) == 9 and got == want and _fields(got) == _fields(want)
        assert messages_from_records(body, "b1", "T") == want  # the consumer's call takes the C path
        assert hot_records(b"", "T", "b1") == []
    finally:
        store.close()


def test_bodies_the_c_decode_hands_back_to_python(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        _records(store)
        store.put("Z", 0, b"plain")
        store.put("Z", 0, zlib.compress(b"z" * 500), sysflag=FLAG_COMPRESSED)
        zbody, tbody, rbody = _body(store, "Z"), _body(store, "T"), _body(store, "%RETRY%g")
        assert hot_records(zbody, "Z", "b1") is None  # compressed: Python inflates it
        assert [m.body for m in messages_from_records(zbody, "b1", "Z")] == [b"plain", b"z" * 500]
        assert hot_records(tbody, "Other", "b1") is None  # not the queue's topic
        assert hot_records(rbody, "%RETRY%g", "b1")[0].topic == "%RETRY%g"
        assert [m.topic for m in messages_from_records(rbody, "b1", "%RETRY%g")] == ["T"]  # the original
        bad = bytearray(tbody)
        bad[R_MAGIC] ^= 0xFF
        for broken in (bytes(bad), tbody[:-1], tbody + b"\x00\x00", tbody[:3]):
            assert hot_records(broken, "T", "b1") is None
            with pytest.raises(StoreCorrupt):
                messages_from_records(broken, "b1", "T")
        with pytest.raises(TypeError):
            hot_records(tbody, b"T", "b1")
    finally:
        store.close()


def test_a_dead_messages_bytes_are_reused_only_when_nothing_else_holds_them(store_root):
    """The decode writes a new message's body and properties into the bytes objects a freed
    message held when nothing else referenced them (hot.c, reuse_bytes): a body or properties
    text still held anywhere (a list, a dict key with its cached hash, a memoryview) keeps its
    bytes, and every message decoded later has its own right bytes and hash."""
    store = MessageStore.open(small_config(store_root))
    try:
        for k in range(40):
            store.put("R", 0, b"body-%04d" % k, properties=b"TAGS\x01t%04d\x02" % k)
        body = b"".join(bytes(v) for v in store.get_messages("R", 0, 0, 64, max_bytes=1 << 30).messages)
        want = [(m.body, m.properties) for m in _python(body, "b1")]
        kept, keys, views = [], {}, []
        for rnd in range(6):
            got = hot_records(body, "R", "b1")
            assert [(m.body, m.properties) for m in got] == want
            assert [hash(m.body) for m in got] == [hash(b) for b, _ in want]
            if rnd == 1:
                kept = [m.body for m in got]
                keys = {m.body: i for i, m in enumerate(got)}
            if rnd == 2:
                views = [memoryview(m.body) for m in got[:5]]
            del got   # their dead messages' bytes are kept for the next decode where unreferenced
        assert kept == [b for b, _ in want] and all(keys[b] == i for i, (b, _) in enumerate(want))
        assert [bytes(v) for v in views] == [b for b, _ in want[:5]]
        # the values a freed message keeps for the next decode (topic, broker, the lazy fields)
        # are written over by what the next record and call say
        for k in range(3):
            store.put("S", 0, b"s-%d" % k, properties=b"KEYS\x01k%d\x02" % k)
        sbody = b"".join(bytes(v) for v in store.get_messages("S", 0, 0, 64, max_bytes=1 << 30).messages)
        for topic, data, broker in (("R", body, "b2"), ("S", sbody, "b3"), ("R", body, "b1")):
            got = hot_records(data, topic, broker)
            assert got == _python(data, broker) and _fields(got) == _fields(_python(data, broker))
            assert {(m.topic, m.broker_name) for m in got} == {(topic, broker)}
            del got
    finally:
        store.close()
