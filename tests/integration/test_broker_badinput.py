"""Bad input over the wire: each gets RocketMQ's answer (or the connection is closed, for
frames that cannot be decoded); the broker keeps serving others; the store verifies after."""
from __future__ import annotations

import struct
import time

import pytest

from shmq.errors import RemotingClosed, RemotingTimeout
from shmq.message.record import iter_records
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import SendMessageRequestHeader, send_header_to_v2
from shmq.store import StoreConfig
from shmq.store.verify import verify_store

from .broker_helpers import TEST_SETTINGS, create_topic, pull, send, start_broker  # noqa: F401
from .conftest import processes  # noqa: F401


def _closed(c: SyncRemotingClient) -> bool:
    try:
        c.receive(3)
    except RemotingClosed:
        return True
    except RemotingTimeout:
        return False
    return False


def _v2(**over):
    h = dict(a="pg", b="BadT", c="TBW102", d="4", e="0", f="0", g=str(int(time.time() * 1000)), h="0")
    h.update(over)
    return {k: v for k, v in h.items() if v is not None}


def test_bad_input_answers_and_the_broker_keeps_serving(start_broker):
    br = start_broker(settings={"maxMessageSize": 1024})
    good = SyncRemotingClient(br.addr, timeout=5)
    bad = SyncRemotingClient(br.addr, timeout=5)
    try:
        assert create_topic(good, "BadT", queues=2).code == 0
        assert send(good, "BadT", b"before").code == 0

        # unknown request codes, including the supervisor's private control codes
        for code in (9999, 9901, 9907):
            r = bad.invoke(request(code))
            assert (r.code, r.remark) == (3, f" request type {code} not supported")
        # missing and wrong-typed header fields: SYSTEM_ERROR with the field named
        r = bad.invoke(request(RequestCode.SEND_MESSAGE_V2, _v2(b=None), b"x"))
        assert r.code == 1 and "topic" in r.remark
        r = bad.invoke(request(RequestCode.SEND_MESSAGE_V2, _v2(e="zero"), b"x"))
        assert r.code == 1 and "queueId" in r.remark
        r = bad.invoke(request(RequestCode.PULL_MESSAGE, consumerGroup="g", topic="BadT", queueId=0))
        assert r.code == 1
        r = bad.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g", topic="BadT", queueId="x"))
        assert r.code == 1
        # invalid topics
        r = bad.invoke(request(RequestCode.SEND_MESSAGE_V2, _v2(b="bad topic!"), b"x"))
        assert r.code == 1 and "illegal characters" in r.remark
        r = bad.invoke(request(RequestCode.SEND_MESSAGE_V2, _v2(b="T" * 200), b"x"))
        assert r.code == 1 and "max length" in r.remark
        r = bad.invoke(request(RequestCode.SEND_MESSAGE_V2, _v2(b="SCHEDULE_TOPIC_XXXX"), b"x"))
        assert r.code == 16
        h = dict(topic="bad/topic", defaultTopic="TBW102", readQueueNums="1", writeQueueNums="1", perm="6",
                 topicFilterType="SINGLE_TAG")
        assert bad.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h)).code == 1
        # a body over maxMessageSize: MESSAGE_ILLEGAL, nothing stored
        r = bad.invoke(request(RequestCode.SEND_MESSAGE_V2, _v2(), b"x" * 2000))
        assert r.code == 13
        # a batch body that does not parse
        r = bad.invoke(request(RequestCode.SEND_BATCH_MESSAGE, _v2(m="true"), b"\x00\x00\x00\x05garbage"))
        assert r.code in (1, 13)
        # bodies that do not parse
        assert bad.invoke(request(RequestCode.HEART_BEAT, body=b"{not json")).code == 1
        assert bad.invoke(request(RequestCode.LOCK_BATCH_MQ, body=b"[]")).code == 1
        # config-changing requests are refused
        assert bad.invoke(request(RequestCode.UPDATE_BROKER_CONFIG, body=b"brokerPermission=0")).code == 16
        # the good client was served all along
        assert send(good, "BadT", b"middle").code == 0

        # frames that cannot be decoded close the connection without an answer
        bad.send_raw(struct.pack(">i", 64 * 1024 * 1024) + b"\x00" * 16)  # beyond maxFrameSize
        assert _closed(bad)
        bad.close()
        bad = SyncRemotingClient(br.addr, timeout=5)
        hdr = b"{this is not json"
        bad.send_raw(struct.pack(">ii", 4 + len(hdr), len(hdr)) + hdr)
        assert _closed(bad)
        bad.close()
        bad = SyncRemotingClient(br.addr, timeout=5)
        bad.send_raw(struct.pack(">ii", 8, (7 << 24) | 4) + b"abcd")  # unknown serialize type
        assert _closed(bad)

        assert send(good, "BadT", b"after").code == 0
        bodies = [bytes(m.body) for m in iter_records(pull(good, "BadT", 0, 0).body)]
        assert bodies == [b"before", b"middle", b"after"]
    finally:
        good.close()
        bad.close()
    assert br.stop(timeout=20) == 0
    rep = verify_store(StoreConfig(root=br.store, mapped_file_size_commitlog=TEST_SETTINGS["mappedFileSizeCommitLog"]))
    assert rep.ok, rep.problems[:5]
    assert rep.per_queue.get(("BadT", 0)) == 3


@pytest.mark.parametrize("props", ["TRAN_MSG\x01true\x02PGROUP\x01pg", "DELAY\x013"])
def test_batch_with_delay_or_transaction_is_illegal(start_broker, props):
    br = start_broker()
    with SyncRemotingClient(br.addr) as c:
        create_topic(c, "BT", queues=1)
        h = SendMessageRequestHeader(producerGroup="pg", topic="BT", defaultTopic="TBW102", defaultTopicQueueNums=4,
                                     queueId=0, sysFlag=0, bornTimestamp=0, flag=0, properties=props, batch=True)
        r = c.invoke(request(RequestCode.SEND_BATCH_MESSAGE, send_header_to_v2(h), b""))
        assert r.code == 13
