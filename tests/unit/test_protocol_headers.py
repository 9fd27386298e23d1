"""Typed custom headers: liberal reading of extFields, strings out, V2 letters."""
from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.errors import CommandFieldError
from shmq.protocol import RequestCode
from shmq.protocol.headers import (
    GetRouteInfoRequestHeader,
    PullMessageRequestHeader,
    PullMessageResponseHeader,
    RegisterBrokerRequestHeader,
    SendMessageRequestHeader,
    decode_send_header,
    send_header_to_v2,
)


def test_numbers_and_booleans_from_text():
    h = RegisterBrokerRequestHeader.from_ext({
        "brokerName": "b", "brokerAddr": "a:1", "clusterName": "c", "haServerAddr": "",
        "brokerId": "0", "compressed": "TRUE", "bodyCrc32": "-5", "bname": "ignored",
    })
    assert (h.brokerId, h.compressed, h.bodyCrc32, h.haServerAddr) == (0, True, -5, "")


def test_boolean_is_java_parse_boolean():
    assert GetRouteInfoRequestHeader.from_ext({"topic": "t", "acceptStandardJsonOnly": "yes"}).acceptStandardJsonOnly is False
    assert GetRouteInfoRequestHeader.from_ext({"topic": "t"}).acceptStandardJsonOnly is None


def test_missing_and_bad_fields():
    with pytest.raises(CommandFieldError) as e:
        GetRouteInfoRequestHeader.from_ext({})
    assert e.value.field == "topic" and "is null" in str(e.value) and e.value.code == 1
    with pytest.raises(CommandFieldError, match="queueId"):
        PullMessageRequestHeader.from_ext({
            "consumerGroup": "g", "topic": "t", "queueId": "x", "queueOffset": "0", "maxMsgNums": "32",
            "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "15000", "subVersion": "0"})


def test_to_ext_strings_only_and_none_dropped():
    h = PullMessageResponseHeader(suggestWhichBrokerId=0, nextBeginOffset=10, minOffset=0, maxOffset=12)
    assert h.to_ext() == {"suggestWhichBrokerId": "0", "nextBeginOffset": "10", "minOffset": "0", "maxOffset": "12"}
    assert GetRouteInfoRequestHeader(topic="t").to_ext() == {"topic": "t"}


SEND = SendMessageRequestHeader(
    producerGroup="pg", topic="T", defaultTopic="TBW102", defaultTopicQueueNums=4, queueId=1, sysFlag=0,
    bornTimestamp=1700000000000, flag=0, properties="TAGS\x01a\x02", reconsumeTimes=0, unitMode=False,
    batch=False, maxReconsumeTimes=16,
)


def test_send_v2_letters():
    v2 = send_header_to_v2(SEND)
    assert v2 == {"a": "pg", "b": "T", "c": "TBW102", "d": "4", "e": "1", "f": "0", "g": "1700000000000",
                  "h": "0", "i": "TAGS\x01a\x02", "j": "0", "k": "false", "l": "16", "m": "false"}
    assert decode_send_header(RequestCode.SEND_MESSAGE_V2, {**v2, "n": "broker-a"}) == SEND
    assert decode_send_header(RequestCode.SEND_BATCH_MESSAGE, v2) == SEND
    assert decode_send_header(RequestCode.SEND_MESSAGE, SEND.to_ext()) == SEND


@settings(deadline=None)
@given(st.builds(SendMessageRequestHeader, producerGroup=st.text(min_size=1), topic=st.text(min_size=1),
                 defaultTopic=st.text(min_size=1), defaultTopicQueueNums=st.integers(0, 64),
                 queueId=st.integers(-1, 1000), sysFlag=st.integers(0, 2**31 - 1),
                 bornTimestamp=st.integers(0, 2**62), flag=st.integers(-(2**31), 2**31 - 1),
                 properties=st.none() | st.text(min_size=1), reconsumeTimes=st.none() | st.integers(0, 100),
                 unitMode=st.booleans(), batch=st.booleans(), maxReconsumeTimes=st.none() | st.integers(-1, 100)))
def test_send_header_round_trips(h):
    assert SendMessageRequestHeader.from_ext(h.to_ext()) == h
    assert decode_send_header(RequestCode.SEND_MESSAGE_V2, send_header_to_v2(h)) == h
