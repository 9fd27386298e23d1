"""Fuzz targets: one function per decoder that meets untrusted bytes, each taking the fuzzer's
``bytes``. A target returns quietly or raises only its decoder's documented exception
(caught here); anything else escaping is a crash, which atheris (run.py) and hypothesis
(test_fuzz.py) both report. Where a decoder has an encoder, what decodes must round-trip.

======================  ==============================================  =====================
target                  decoder                                         documented exception
======================  ==============================================  =====================
frame                   protocol.frame.FrameDecoder (chunked feeds)     FrameError
command                 protocol.command.decode_command (JSON/binary)   FrameError
record                  message.record.decode_record / iter_records     StoreCorrupt
properties              message.properties.decode_properties (+ trip)   none
batch                   message.batch.decode_batch (+ round trip)       BodyDecodeError
sql92                   message.sql_filter.compile, Filter.matches      FilterExpressionError
======================  ==============================================  =====================
"""
from __future__ import annotations

from shmq.errors import BodyDecodeError, FilterExpressionError, FrameError, StoreCorrupt
from shmq.protocol import command as _command
from shmq.protocol import frame as _frame
from shmq.message import batch as _batch
from shmq.message import properties as _props
from shmq.message import record as _record
from shmq.message import sql_filter as _sql

#: The modules atheris instruments for coverage feedback.
MODULES = (_frame, _command, _record, _props, _batch, _sql)

_MAX_FRAME = 64 * 1024


def frame(data: bytes) -> None:
    dec = _frame.FrameDecoder(_MAX_FRAME)
    # the first byte chooses the chunk size, so frames split at every possible place
    step = (data[0] % 17 + 1) if data else 1
    total = 0
    try:
        for i in range(1, len(data), step):
            for f in dec.feed(data[i:i + step]):
                total += len(f)
                assert 4 <= len(f) + 4 <= _MAX_FRAME
    except FrameError:
        return
    assert dec.pending <= _MAX_FRAME  # never more buffered than one allowed frame


def command(data: bytes) -> None:
    try:
        cmd = _command.decode_command(data)
    except FrameError:
        return
    # what decodes can be encoded again, and decodes to the same command
    again = _command.decode_command(_command.encode_command(cmd)[4:])
    assert (again.code, again.opaque, again.flag, again.ext_fields, again.body) == \
        (cmd.code, cmd.opaque, cmd.flag, cmd.ext_fields, cmd.body)


def record(data: bytes) -> None:
    try:
        m = _record.decode_record(data)
        assert m.size <= len(data)
    except StoreCorrupt:
        pass
    try:
        for _ in _record.iter_records(data):
            pass
    except StoreCorrupt:
        pass


def properties(data: bytes) -> None:
    props = _props.decode_properties(data)
    assert all(k and v for k, v in props.items())
    assert _props.decode_properties(_props.encode_properties(props)) == props


def batch(data: bytes) -> None:
    try:
        entries = _batch.decode_batch(data)
    except BodyDecodeError:
        return
    assert _batch.decode_batch(_batch.encode_batch(entries)) == entries


_PROPS = [{}, {"a": "1"}, {"a": "abc", "b": "2.5", "TAGS": "x"}, {"a": "-9223372036854775808", "c": "true"}]


def sql92(data: bytes) -> None:
    text = data.decode("utf-8", "replace")
    try:
        f = _sql.compile(text)
    except FilterExpressionError:
        return
    for props in _PROPS:
        assert f.matches(props) in (True, False)


TARGETS = {f.__name__: f for f in (frame, command, record, properties, batch, sql92)}


def seeds() -> dict[str, list[bytes]]:
    """A few valid inputs per target, so the fuzzer starts from the formats' structure."""
    from shmq.protocol import request
    from shmq.protocol.codes import SerializeType
    json_cmd = request(310, {"a": "pg", "b": "T", "e": "0"}, b"body")
    bin_cmd = request(11, {"topic": "T", "queueId": "1"}, b"")
    bin_cmd.serialize_type = SerializeType.ROCKETMQ
    frames = [_command.encode_command(c) for c in (json_cmd, bin_cmd)]
    return {
        "frame": [b"\x03" + frames[0] + frames[1], b"\x00" + frames[1]],
        "command": [f[4:] for f in frames],
        "record": [_record.encode_record(topic="T", body=b"hello", properties=b"KEYS\x01k\x02TAGS\x01a") * 2],
        "properties": [b"KEYS\x01a b\x02TAGS\x01t\x02UNIQ_KEY\x01ABC\x02"],
        "batch": [_batch.encode_batch([_batch.BatchEntry(b"one", "KEYS\x01k"), _batch.BatchEntry(b"two")])],
        "sql92": [b"a > 1 AND b IN ('x', 'y') OR c IS NULL", b"TAGS = 'a' AND NOT (n BETWEEN 1 AND 3.5)"],
    }
