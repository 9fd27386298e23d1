"""A held pull's answer is written from a header template (processors/pull.py ``_send_answer``):
the bytes on the wire must be the ones the generic path (``encode_command(_get(...))``) writes,
for every status, both suggestWhichBrokerId values, any opaque, and the cases it hands back
(a binary header, a body the transport writes uncopied)."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest

from shmq.broker.shared.config import BrokerConfig
from shmq.broker.worker.processors.pull import Processor
from shmq.broker.worker.pull_hold import PullHolds
from shmq.message.javahash import java_string_hash_cached
from shmq.protocol import RemotingCommand, RequestCode, SerializeType, decode_command, encode_command
from shmq.protocol.bodies import SubscriptionData, TopicConfig
from shmq.protocol.headers import PullMessageRequestHeader


class WireConn:
    """Records the bytes each of the connection's two writers would put on the wire."""
    closed = False
    peer = "127.0.0.1:1"

    def __init__(self):
        self.frames, self.context = [], {}
        self.limits = SimpleNamespace(max_inflight=64)

    def send(self, cmd):
        self.frames.append(encode_command(cmd))

    def write_frame(self, frame):
        self.frames.append(frame)

    def defer_flush(self):  # (as a connection in its own read: nothing to flush after)
        return False


def processor(store, **cfg):
    bc = BrokerConfig()
    for k, v in cfg.items():
        setattr(bc, k, v)
    sub = SubscriptionData(topic="T", subString="*", subVersion=1, expressionType="TAG")
    w = SimpleNamespace(cfg=bc, store=store, holds=None, stats={"get": 0},
                        topics={"T": TopicConfig(topicName="T", readQueueNums=4, writeQueueNums=4)},
                        cached_subscription=lambda g, t: sub)
    return Processor(w), w


def pull_cmd(offset: int, opaque: int, queue: int = 0, suspend: bool = False) -> RemotingCommand:
    ext = {"consumerGroup": "G", "topic": "T", "queueId": str(queue), "queueOffset": str(offset),
           "maxMsgNums": "32", "sysFlag": "3" if suspend else "1", "commitOffset": "-1",
           "suspendTimeoutMillis": "15000", "subscription": "*", "subVersion": "1", "expressionType": "TAG"}
    return decode_command(encode_command(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=opaque,
                                                         ext_fields=ext))[4:])


def both(p, cmd, codes=None):
    h = PullMessageRequestHeader.from_ext(cmd.ext_fields)
    conn = WireConn()
    p._send_answer(conn, cmd, h, codes)
    (frame,) = conn.frames
    return encode_command(p._get(cmd, h, codes)), frame


@pytest.mark.parametrize("opaque", [0, 7, 2**31 - 1, -5])
def test_every_status_is_byte_identical(open_store, opaque):
    s = open_store()
    for i in range(5):
        s.put("T", 0, b"m%d" % i, {"TAGS": "a"})
    p, _ = processor(s)
    codes_b = {java_string_hash_cached("b")}
    cases = [(4, None), (0, None), (5, None), (9, None), (0, codes_b)]  # 1 msg, 5, NOT_FOUND, MOVED, RETRY
    seen = set()
    for offset, codes in cases:
        old, new = both(p, pull_cmd(offset, opaque), codes)
        assert new == old
        seen.add(decode_command(new[4:]).code)
    # an unknown queue asked at 0 and past 0 (PULL_NOT_FOUND and OFFSET_MOVED)
    for offset in (0, 3):
        old, new = both(p, pull_cmd(offset, opaque, queue=3))
        assert new == old
        seen.add(decode_command(new[4:]).code)
    assert seen == {0, 19, 20, 21}


def test_suggest_slave_binary_header_and_large_body(open_store):
    s = open_store(max_message_size=48 * 1024)
    s.put("T", 0, b"x")
    p, _ = processor(s, slaveReadEnable=True, accessMessageInMemoryMaxRatio=0)
    old, new = both(p, pull_cmd(0, 11))
    assert new == old and decode_command(new[4:]).ext_fields["suggestWhichBrokerId"] == "1"
    cmd = pull_cmd(0, 12)
    cmd.serialize_type = SerializeType.ROCKETMQ
    old, new = both(p, cmd)
    assert new == old
    for _ in range(2):  # 2 x 40 KiB: a body the transport writes without copying it
        s.put("T", 1, b"y" * 40 * 1024)
    old, new = both(p, pull_cmd(0, 13, queue=1))
    assert new == old and len(decode_command(new[4:]).body) > 64 * 1024


def test_held_pull_answered_with_the_same_bytes(open_store):
    s = open_store()
    s.put("T", 0, b"first")
    p, w = processor(s)
    loop = asyncio.new_event_loop()
    w.holds = PullHolds(s, loop)
    try:
        conn = WireConn()
        cmd = pull_cmd(1, 99, suspend=True)
        assert p.pull(conn, cmd) is None and conn.frames == []  # parked
        s.put("T", 0, b"second")
        w.holds.check()
        (frame,) = conn.frames
        assert frame == encode_command(p._get(cmd, PullMessageRequestHeader.from_ext(cmd.ext_fields), None))
        assert decode_command(frame[4:]).ext_fields["nextBeginOffset"] == "2"
    finally:
        w.holds.close()
        loop.close()
