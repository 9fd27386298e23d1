"""Properties text, batch body, offset msgId and the masked CRC."""
from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings, strategies as st

from shmq.errors import BodyDecodeError
from shmq.message.batch import BatchEntry, decode_batch, encode_batch
from shmq.message.layout import masked_crc32
from shmq.message.msgid import create_offset_msg_id, decode_offset_msg_id
from shmq.message.properties import decode_properties, encode_properties


def test_properties_java_form_and_tolerance():
    assert encode_properties({"TAGS": "a", "KEYS": "k1 k2"}) == "TAGS\x01a\x02KEYS\x01k1 k2"
    assert decode_properties("TAGS\x01a\x02KEYS\x01k1 k2\x02") == {"TAGS": "a", "KEYS": "k1 k2"}  # ali-ons, C++
    assert decode_properties("\x02\x02TAGS\x01a\x02\x01x\x02EMPTY\x01\x02NOSEP") == {"TAGS": "a"}
    assert decode_properties(b"A\x01b") == {"A": "b"}
    assert decode_properties("") == {} and decode_properties(None) == {}


keys = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), min_size=1, max_size=10)


@settings(deadline=None)
@given(st.dictionaries(keys, keys, max_size=8))
def test_properties_round_trip(props):
    assert decode_properties(encode_properties(props)) == props
    assert decode_properties(encode_properties(props) + "\x02") == props


def test_batch_hand_built():
    props = "UNIQ_KEY\x01ABC".encode()
    entry = (struct.pack(">iiiii", 20 + 3 + 2 + len(props), 0, 0, 7, 3) + b"abc"
             + struct.pack(">h", len(props)) + props)
    empty = struct.pack(">iiiii", 22, 0, 0, 0, 0) + struct.pack(">h", 0)
    raw = entry + empty
    assert decode_batch(raw) == [BatchEntry(b"abc", "UNIQ_KEY\x01ABC", 7), BatchEntry(b"", "", 0)]
    assert encode_batch(decode_batch(raw)) == raw


@pytest.mark.parametrize("raw", [
    b"\x00\x00\x00\x05",                                                  # truncated header
    struct.pack(">iiiii", 100, 0, 0, 0, 3) + b"abc" + b"\x00\x00",        # totalSize past the end
    struct.pack(">iiiii", 25, 0, 0, 0, -1) + b"abc" + b"\x00\x00",        # negative body length
    struct.pack(">iiiii", 25, 0, 0, 0, 3) + b"abc" + b"\x00\x05",        # propsLen disagrees
])
def test_batch_malformed(raw):
    with pytest.raises(BodyDecodeError):
        decode_batch(raw)


@settings(deadline=None)
@given(st.lists(st.builds(BatchEntry, st.binary(max_size=64), keys, st.integers(-(2**31), 2**31 - 1)), max_size=6))
def test_batch_round_trip(entries):
    assert decode_batch(encode_batch(entries)) == entries


def test_offset_msg_id():
    mid = create_offset_msg_id("127.0.0.1", 10911, 0x1234)
    assert mid == "7F00000100002A9F0000000000001234"
    assert decode_offset_msg_id(mid) == ("127.0.0.1", 10911, 0x1234)
    v6 = create_offset_msg_id("::1", 10911, 2**40)
    assert len(v6) == 56 and decode_offset_msg_id(v6) == ("::1", 10911, 2**40)
    with pytest.raises(ValueError):
        decode_offset_msg_id("XYZ")


def test_masked_crc32():
    assert zlib.crc32(b"a") == 0xE8B7BE43
    assert masked_crc32(b"a") == 0x68B7BE43
    assert masked_crc32(b"") == 0
