"""RemotingCommand codec against frames built by hand from RocketMQ's layout (JSON and binary)."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.errors import HeaderDecodeError
from shmq.protocol import FrameDecoder, LanguageCode, RemotingCommand, SerializeType, decode_command, encode_command
from shmq.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE
from shmq.protocol.command import java_str, request


def jframe(header: bytes, body: bytes = b"") -> bytes:
    """length | mark (type 0, header length) | header | body, by hand."""
    return struct.pack(">ii", 4 + len(header) + len(body), len(header)) + header + body


class TestJsonHeader:
    def test_request_encodes_as_java_writes_it(self):
        header = (b'{"code":105,"extFields":{"topic":"TopicTest"},"flag":0,"language":"JAVA","opaque":42,'
                  b'"serializeTypeCurrentRPC":"JSON","version":409}')
        cmd = RemotingCommand(code=105, opaque=42, ext_fields={"topic": "TopicTest"})
        assert encode_command(cmd) == jframe(header)

    def test_response_with_remark_and_body(self):
        header = (b'{"code":17,"flag":1,"language":"JAVA","opaque":7,"remark":"no route",'
                  b'"serializeTypeCurrentRPC":"JSON","version":409}')
        req = RemotingCommand(code=105, opaque=7)
        resp = req.make_response(17, "no route", body=b"xyz")
        assert encode_command(resp) == jframe(header, b"xyz")
        assert decode_command(jframe(header, b"xyz")[4:]) == resp

    def test_ali_ons_frame_numbers_and_booleans_unquoted(self):
        # What ali-ons' RemotingCommand.buildHeader sends (key order, no remark, raw scalars).
        header = (b'{"code":11,"language":"JAVA","opaque":3,"flag":0,"version":121,"extFields":'
                  b'{"consumerGroup":"g","queueId":0,"queueOffset":12345678901,"sysFlag":6,"unitMode":false,'
                  b'"subscription":"*","ratio":0.5,"nothing":null}}')
        cmd = decode_command(jframe(header)[4:])
        assert (cmd.code, cmd.opaque, cmd.flag, cmd.version, cmd.language) == (11, 3, 0, 121, "JAVA")
        assert cmd.ext_fields == {"consumerGroup": "g", "queueId": "0", "queueOffset": "12345678901",
                                  "sysFlag": "6", "unitMode": "false", "subscription": "*", "ratio": "0.5"}
        assert cmd.remark is None and cmd.body == b""
        assert cmd.serialize_type == SerializeType.JSON

    def test_cpp_style_and_unknown_keys(self):
        header = (b'{"code":"310","language":"CPP","version":63,"opaque":"9","flag":0,"remark":"",'
                  b'"extFields":{"m":"0","AccessKey":"","OnsChannel":"ALIYUN"},"serializeTypeCurrentRPC":"JSON",'
                  b'"somethingNew":{"x":[1]}}')
        cmd = decode_command(jframe(header)[4:])
        assert (cmd.code, cmd.opaque, cmd.language, cmd.version) == (310, 9, "CPP", 63)
        assert cmd.ext_fields["m"] == "0" and cmd.ext_fields["AccessKey"] == ""

    def test_language_as_number(self):
        cmd = decode_command(jframe(b'{"code":1,"language":9}')[4:])
        assert cmd.language == "GO"

    def test_ext_values_always_go_out_as_strings(self):
        cmd = request(105, topic="T", queueId=3, unitMode=True, maybe=None)
        raw = encode_command(cmd)
        assert b'"extFields":{"topic":"T","queueId":"3","unitMode":"true"}' in raw

    @pytest.mark.parametrize("header", [b"{", b"[]", b'{"code":"x"}', b'{"code":1,"extFields":{"a":{}}}',
                                        b'{"code":1,"extFields":[]}', b"\xff\xfe{}", b'{"code":1,"opaque":1.5}'])
    def test_bad_json_raises(self, header):
        with pytest.raises(HeaderDecodeError):
            decode_command(jframe(header)[4:])


def bframe(header: bytes, body: bytes = b"") -> bytes:
    return struct.pack(">ii", 4 + len(header) + len(body), (1 << 24) | len(header)) + header + body


# code 105, language JAVA(0), version 409, opaque 42, flag 0, remark none,
# extFields {"topic": "TopicTest"}: keyLen i16, key, valLen i32, value -> 2+5+4+9 = 20 bytes.
BINARY_HEADER = (b"\x00\x69" b"\x00" b"\x01\x99" b"\x00\x00\x00\x2a" b"\x00\x00\x00\x00"
                 b"\x00\x00\x00\x00"
                 b"\x00\x00\x00\x14" b"\x00\x05topic" b"\x00\x00\x00\x09TopicTest")


class TestBinaryHeader:
    def test_decode_hand_built(self):
        cmd = decode_command(bframe(BINARY_HEADER, b"BODY")[4:])
        assert (cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag) == (105, "JAVA", 409, 42, 0)
        assert cmd.remark is None and cmd.ext_fields == {"topic": "TopicTest"} and cmd.body == b"BODY"
        assert cmd.serialize_type == SerializeType.ROCKETMQ

    def test_encode_matches_hand_built(self):
        cmd = RemotingCommand(code=105, opaque=42, ext_fields={"topic": "TopicTest"}, body=b"BODY",
                              serialize_type=SerializeType.ROCKETMQ)
        assert encode_command(cmd) == bframe(BINARY_HEADER, b"BODY")

    def test_remark_and_language_number(self):
        header = (b"\x00\x11" b"\x09" b"\x01\x3d" b"\x00\x00\x00\x05" b"\x00\x00\x00\x01"
                  b"\x00\x00\x00\x03abc" b"\x00\x00\x00\x00")
        cmd = decode_command(bframe(header)[4:])
        assert (cmd.code, cmd.language, cmd.version, cmd.remark, cmd.flag) == (17, "GO", 317, "abc", FLAG_RESPONSE)
        assert encode_command(cmd) == bframe(header)

    def test_response_keeps_the_request_serialize_type(self):
        req = decode_command(bframe(BINARY_HEADER)[4:])
        resp = req.make_response(3, " request type 105 not supported")
        assert resp.serialize_type == SerializeType.ROCKETMQ and resp.opaque == 42 and resp.is_response
        raw = encode_command(resp)
        assert raw[4] == 1  # high byte of mark

    @pytest.mark.parametrize("header", [
        BINARY_HEADER[:10],                                        # shorter than the fixed part
        BINARY_HEADER[:13] + b"\x00\x00\x10\x00",                  # remark longer than the header
        BINARY_HEADER[:17] + b"\x00\x00\x00\x30" + BINARY_HEADER[21:],  # extLen past the end
        BINARY_HEADER[:21] + b"\x7f\xff" + BINARY_HEADER[23:],     # key length past extLen
        BINARY_HEADER[:13] + b"\xff\xff\xff\xff" + BINARY_HEADER[17:],  # negative remark length
        BINARY_HEADER[:28] + b"\xff\xfe" + BINARY_HEADER[30:],     # key is not UTF-8
    ])
    def test_malformed_raises(self, header):
        with pytest.raises(HeaderDecodeError):
            decode_command(bframe(header)[4:])


class TestFrameChecks:
    def test_header_length_beyond_frame(self):
        raw = struct.pack(">i", 100) + b"{}"
        with pytest.raises(HeaderDecodeError, match="bad header length"):
            decode_command(raw)

    def test_zero_header_length(self):
        with pytest.raises(HeaderDecodeError):
            decode_command(struct.pack(">i", 0) + b"body")

    def test_unknown_serialize_type(self):
        with pytest.raises(HeaderDecodeError, match="serialize type 2"):
            decode_command(struct.pack(">i", (2 << 24) | 2) + b"{}")

    def test_flags(self):
        c = RemotingCommand(code=1, flag=FLAG_ONEWAY)
        assert c.is_oneway and not c.is_response


def test_java_str():
    assert [java_str(v) for v in ("a", 1, True, False, 1.0, 0.5, -7)] == ["a", "1", "true", "false", "1.0", "0.5", "-7"]


# ---- round trips ----------------------------------------------------------------------------
i32 = st.integers(-(2**31), 2**31 - 1)
texts = st.text(max_size=40)
ext = st.dictionaries(st.text(min_size=1, max_size=20), texts, max_size=6)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**15), 2**15 - 1),
    opaque=i32,
    flag=st.integers(0, 3),
    remark=st.none() | st.text(min_size=1, max_size=60),
    ext_fields=ext,
    body=st.binary(max_size=200),
    language=st.sampled_from([lc.name for lc in LanguageCode]),
    version=st.integers(0, 2**15 - 1),
    serialize_type=st.sampled_from([SerializeType.JSON, SerializeType.ROCKETMQ]),
)


@settings(deadline=None)
@given(commands)
def test_round_trip(cmd):
    raw = encode_command(cmd)
    frames = FrameDecoder().feed(raw)
    assert len(frames) == 1
    assert decode_command(frames[0]) == cmd


@settings(deadline=None)
@given(st.lists(commands, min_size=1, max_size=5), st.data())
def test_stream_split_anywhere(cmds, data):
    stream = b"".join(encode_command(c) for c in cmds)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(stream)), max_size=8)))
    dec, out, prev = FrameDecoder(), [], 0
    for cut in cuts + [len(stream)]:
        out += dec.feed(stream[prev:cut])
        prev = cut
    assert [decode_command(f) for f in out] == cmds
    assert dec.pending == 0


def test_raise_for_code():
    from shmq.errors import BrokerError, TopicNotExist

    ok = RemotingCommand(code=0)
    assert ok.raise_for_code() is ok
    with pytest.raises(TopicNotExist) as e:
        RemotingCommand(code=17, remark="no route").raise_for_code()
    assert e.value.code == 17 and e.value.remark == "no route"
    assert RemotingCommand(code=19).raise_for_code(0, 19).code == 19
    with pytest.raises(BrokerError):
        RemotingCommand(code=1).raise_for_code()
