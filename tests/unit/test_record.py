"""The record codec: byte-exact against a record built by hand from the reference layout
(RocketMQ's MessageDecoder layout, as shmq/native/layout.h draws it), and the C append writes exactly those bytes."""
import socket
import struct
import zlib

from hypothesis import given, settings, strategies as st

from shmq.message.msgid import decode_offset_msg_id
from shmq.message.properties import decode_properties, encode_properties
from shmq.message.record import decode_record, encode_record
from shmq.native import lib


def hand_built(body: bytes, topic: bytes, props: bytes, *, qid, flag, qoff, phys, sysflag, born_ts,
               born, store_ts, store, reconsume, prepared) -> bytes:
    total = 4 + 4 + 4 + 4 + 4 + 8 + 8 + 4 + 8 + 8 + 8 + 8 + 4 + 8 + 4 + len(body) + 1 + len(topic) + 2 + len(props)
    out = b""
    out += struct.pack(">i", total)
    out += bytes.fromhex("DAA320A7")
    out += struct.pack(">i", zlib.crc32(body) & 0x7FFFFFFF)
    out += struct.pack(">i", qid) + struct.pack(">i", flag) + struct.pack(">q", qoff) + struct.pack(">q", phys)
    out += struct.pack(">i", sysflag) + struct.pack(">q", born_ts)
    out += socket.inet_aton(born[0]) + struct.pack(">i", born[1])
    out += struct.pack(">q", store_ts)
    out += socket.inet_aton(store[0]) + struct.pack(">i", store[1])
    out += struct.pack(">i", reconsume) + struct.pack(">q", prepared)
    out += struct.pack(">i", len(body)) + body
    out += struct.pack(">b", len(topic)) + topic
    out += struct.pack(">h", len(props)) + props
    return out


def test_encode_matches_hand_built():
    props = "TAGS\x01tagA\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01ABCDEF".encode()
    kw = dict(qid=3, flag=7, qoff=42, phys=1000, sysflag=0, born_ts=1700000000000,
              born=("10.0.0.2", 5555), store_ts=1700000000005, store=("127.0.0.1", 10911),
              reconsume=2, prepared=0)
    expected = hand_built(b"hello", b"TopicA", props, **kw)
    got = encode_record(topic="TopicA", body=b"hello", properties=props, queue_id=3, flag=7,
                        queue_offset=42, phys_offset=1000, born_timestamp=kw["born_ts"],
                        born_host=kw["born"], store_timestamp=kw["store_ts"],
                        store_host=kw["store"], reconsume_times=2)
    assert got == expected
    assert len(got) == 91 + 5 + 6 + len(props)
    m = decode_record(got)
    assert (m.topic, m.queue_id, m.queue_offset, m.phys_offset, m.flag) == ("TopicA", 3, 42, 1000, 7)
    assert m.tags == "tagA" and m.keys == ["k1", "k2"] and m.msg_id == "ABCDEF"
    assert m.born_host == ("10.0.0.2", 5555) and m.store_host == ("127.0.0.1", 10911)
    assert bytes(m.body) == b"hello"


def test_c_append_writes_the_reference_bytes(open_store):
    s = open_store(store_host=("127.0.0.1", 10911))
    props = "TAGS\x01tagA\x02KEYS\x01k1".encode()
    r = s.put("TopicA", 2, b"payload", props, flag=9, born_timestamp=1234, born_host=("127.0.0.9", 77),
              reconsume_times=1)
    raw = bytes(s.read_at(r.phys_offset))
    expected = hand_built(b"payload", b"TopicA", props, qid=2, flag=9, qoff=0, phys=r.phys_offset,
                          sysflag=0, born_ts=1234, born=("127.0.0.9", 77), store_ts=r.store_timestamp,
                          store=("127.0.0.1", 10911), reconsume=1, prepared=0)
    assert raw == expected
    assert r.msg_id == (socket.inet_aton("127.0.0.1") + struct.pack(">iq", 10911, r.phys_offset)).hex().upper()
    assert decode_offset_msg_id(r.msg_id) == ("127.0.0.1", 10911, r.phys_offset)


def test_properties_separators():
    assert encode_properties({"A": "1", "B": "2"}) == "A\x011\x02B\x012"
    # trailing separator (ali-ons, C++) and empty names/values are tolerated
    assert decode_properties(b"A\x011\x02B\x012\x02") == {"A": "1", "B": "2"}
    assert decode_properties(b"A\x01\x02\x01x\x02C\x013") == {"C": "3"}


def test_tag_code_is_java_hashcode():
    assert lib.shmq_tag_code_of_props(b"TAGS\x01TagA", 9) == 2598919
    assert lib.shmq_tag_code_of_props(b"KEYS\x01x\x02TAGS\x01hello\x02", 20) == 99162322
    assert lib.shmq_tag_code_of_props(b"KEYS\x01x", 6) == 0
    # non-ASCII goes through UTF-16 code units like Java ("é" = U+00E9 = 233; "😀" is two units)
    e = "é".encode()
    assert lib.shmq_java_hash(e, len(e)) == 233
    g = "😀".encode()
    assert lib.shmq_java_hash(g, len(g)) == 0xD83D * 31 + 0xDE00



def _tag_code_walk(p: bytes) -> int:
    """The pair walk shmq_tag_code_of_props makes (as its byte-by-byte C form was): a name a \x02
    ends before any \x01 is skipped; the first TAGS pair's value hashed, 0 when empty or absent."""
    i, n = 0, len(p)
    while i < n:
        name = i
        while i < n and p[i] not in (1, 2):
            i += 1
        if i >= n or p[i] == 2:
            i += 1
            continue
        key = p[name:i]
        val = i = i + 1
        while i < n and p[i] != 2:
            i += 1
        if key == b"TAGS":
            return lib.shmq_java_hash(p[val:i], i - val) if i > val else 0
        i += 1
    return 0


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([b"\x01", b"\x02", b"TAGS", b"T", b"x", b"UNIQ_KEY", b"AB"]), max_size=12))
def test_tag_code_of_props_is_the_pair_walk(parts):
    """shmq_tag_code_of_props (memchr to the separators) reads every text as the pair walk does."""
    p = b"".join(parts)
    assert lib.shmq_tag_code_of_props(p, len(p)) == _tag_code_walk(p)

@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("aZ09#_-é日😀"), max_size=70) | st.text(max_size=70))
def test_c_java_hash_matches_the_python_one(s):
    """The C hash (eight ASCII bytes a step, then byte by byte) against shmq.message.javahash on
    text of every length, ASCII runs broken by multi-byte characters at any position."""
    from shmq.message.javahash import java_string_hash
    b = s.encode("utf-8", "surrogatepass")
    assert lib.shmq_java_hash(b, len(b)) == java_string_hash(s)


names = st.text(alphabet=st.characters(blacklist_characters="\x00\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=20)


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=2000), topic=st.from_regex(r"[A-Za-z0-9_%|-]{1,127}", fullmatch=True),
       props=st.dictionaries(names, names, max_size=5), qid=st.integers(0, 2**31 - 1),
       qoff=st.integers(0, 2**62), phys=st.integers(0, 2**62), flag=st.integers(-2**31, 2**31 - 1))
def test_round_trip(body, topic, props, qid, qoff, phys, flag):
    raw = encode_record(topic=topic, body=body, properties=encode_properties(props), queue_id=qid,
                        queue_offset=qoff, phys_offset=phys, flag=flag)
    m = decode_record(raw)
    assert bytes(m.body) == body and m.topic == topic and m.properties == props
    assert (m.queue_id, m.queue_offset, m.phys_offset, m.flag, m.size) == (qid, qoff, phys, flag, len(raw))
    assert lib.shmq_check_record(raw, len(raw), phys, 1) == len(raw)
