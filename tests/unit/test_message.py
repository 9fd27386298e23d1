"""shmq.message: the classify rule, the byte-level property edits every write path shares,
msgIds of both families and the one record decoder's refusals."""
import pytest

from shmq.errors import StoreCorrupt
from shmq.message.classify import AS_SENT, Kind, classify
from shmq.message.layout import TX_COMMIT_TYPE, TX_PREPARED_TYPE, TX_ROLLBACK_TYPE
from shmq.message.msgid import create_offset_msg_id, decode_offset_msg_id, host_bytes, offset_msg_id
from shmq.message.properties import drop_pair, pair, pair_key, stored_properties
from shmq.message.record import decode_record, encode_record, unpack_record


@pytest.mark.parametrize("topic, props, sysflag, kind", [
    ("T", None, 0, Kind.PLAIN),
    ("T", b"TAGS\x01a\x02KEYS\x01k", 0, Kind.PLAIN),
    ("T", "TAGS\x01a", 0, Kind.PLAIN),
    ("T", {"TAGS": "a"}, 0, Kind.PLAIN),
    ("T", b"DELAY\x013", 0, Kind.DELAYED),
    ("T", {"DELAY": "3"}, 0, Kind.DELAYED),
    ("T", "DELAY\x01x", 0, Kind.DELAYED),            # not an integer: the pipeline refuses it
    ("T", b"DELAY\x010", 0, Kind.PLAIN),
    ("T", b"u\x01xDELAY\x013", 0, Kind.PLAIN),       # a value, not a DELAY pair
    ("T", b"TRAN_MSG\x01true\x02DELAY\x012", TX_PREPARED_TYPE, Kind.HALF),   # a half is never delayed
    ("T", b"TRAN_MSG\x01false", 0, Kind.PLAIN),
    ("T", b"TRAN_MSG\x01true\x02DELAY\x012", TX_COMMIT_TYPE, Kind.DELAYED),  # the commit applies it
    ("T", b"a\x01b", TX_COMMIT_TYPE, Kind.COMMIT),
    ("T", b"DELAY\x012", TX_ROLLBACK_TYPE, Kind.ROLLBACK),
    ("T", b"TIMER_DELAY_SEC\x015", 0, Kind.TIMER),
    ("%RETRY%G", b"DELAY\x013", 0, Kind.RETRY),
])
def test_classify(topic, props, sysflag, kind):
    assert classify(topic, props, sysflag) is kind


def test_as_sent_kinds():
    assert AS_SENT == {Kind.PLAIN, Kind.COMMIT, Kind.ROLLBACK}  # a TIMER goes to rmq_sys_wheel_timer


@pytest.mark.parametrize("raw, want", [
    (b"WAIT\x01true", b""),
    (b"a\x01b\x02WAIT\x01true", b"a\x01b"),
    (b"WAIT\x01true\x02a\x01b", b"a\x01b"),
    (b"a\x01WAIT\x01\x02WAIT\x01q\x02WAIT\x01r", b"a\x01WAIT\x01"),   # a value that looks like a name stays
])
def test_drop_pair_bytes_and_text_agree(raw, want):
    assert drop_pair(raw, pair_key("WAIT")) == want
    assert drop_pair(raw.decode(), "WAIT\x01") == want.decode()


@pytest.mark.parametrize("raw", [b"", b"WAIT\x01true", b"a\x01b\x02", b"TAGS\x01a\x02CLUSTER\x01Other\x02KEYS\x01k"])
def test_stored_properties_drop_wait_and_replace_cluster(raw):
    cp = pair("CLUSTER", "C")
    out = stored_properties(raw, cp)
    assert out == stored_properties(raw.decode(), cp)
    assert out.endswith(b"CLUSTER\x01C") and out.count(b"CLUSTER\x01") == 1 and b"WAIT\x01" not in out


@pytest.mark.parametrize("host", ["127.0.0.1", "10.1.2.3", "::1", "fe80::1:2"])
def test_offset_msg_id_round_trip(host):
    mid = create_offset_msg_id(host, 10911, 123456789)
    assert len(mid) == (32 if "." in host else 56)
    assert decode_offset_msg_id(mid) == (host, 10911, 123456789)
    assert offset_msg_id(host_bytes(host, 10911), 123456789) == mid


def test_decoder_refuses_what_is_no_record():
    rec = encode_record(topic="T", body=b"body", properties="a\x01b")
    assert decode_record(rec).properties == {"a": "b"}
    for bad in (rec[:50], b"\0" * len(rec), rec[:-1], rec[:4] + b"\x12\x34\x56\x78" + rec[8:]):
        with pytest.raises(StoreCorrupt):
            unpack_record(memoryview(bad))
    longer = (len(rec) + 1).to_bytes(4, "big") + rec[4:] + b"x"
    with pytest.raises(StoreCorrupt):
        unpack_record(memoryview(longer))
