"""JSON bodies as RocketMQ writes and reads them, fastjson quirks included."""
from __future__ import annotations

import struct
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shmq.errors import BodyDecodeError
from shmq.protocol.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    LockBatchRequestBody,
    LockBatchResponseBody,
    MessageQueue,
    QueueData,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    TopicRouteData,
    decode_heartbeat,
    decode_json,
    decode_register_body,
    decode_topic_route,
    encode_cluster_info,
    encode_json,
    encode_register_body,
    encode_topic_route,
    quote_bare_keys,
)

# verbatim: a 4.9.8 NameServer's answer to a client below V4_9_4.
DOC_ROUTE = ('{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"b1","cluster":"DefaultCluster"}],'
             '"filterServerTable":{},"queueDatas":[{"brokerName":"b1","perm":6,"readQueueNums":4,"topicSysFlag":0,'
             '"writeQueueNums":4}]}')

ROUTE = TopicRouteData(
    queueDatas=[QueueData(brokerName="b1", readQueueNums=4, writeQueueNums=4, perm=6)],
    brokerDatas=[BrokerData(cluster="DefaultCluster", brokerName="b1", brokerAddrs={0: "127.0.0.1:10911"})],
)


class TestRoute:
    def test_encode_matches_the_reference_string(self):
        assert encode_topic_route(ROUTE).decode() == DOC_ROUTE

    def test_decode_reference_string(self):
        assert decode_topic_route(DOC_ROUTE.encode()) == ROUTE

    def test_standard_form_quotes_keys_and_escapes_non_ascii(self):
        r = TopicRouteData(queueDatas=ROUTE.queueDatas, orderTopicConf="b1:4",
                           brokerDatas=[BrokerData(cluster="集群", brokerName="b1", brokerAddrs={1: "h:2", 0: "h:1"})])
        std = encode_topic_route(r, standard_json=True)
        assert b'"brokerAddrs":{"0":"h:1","1":"h:2"}' in std
        assert b'"cluster":"\\u96C6\\u7FA4"' in std  # fastjson's upper-case hex
        assert std.startswith(b'{"brokerDatas"') and b'"orderTopicConf":"b1:4"' in std
        quirky = encode_topic_route(r)
        assert b'"brokerAddrs":{0:"h:1",1:"h:2"}' in quirky and "集群".encode() in quirky
        assert decode_topic_route(std) == decode_topic_route(quirky) == r

    def test_old_topic_syn_flag_is_read(self):
        old = DOC_ROUTE.replace('"topicSysFlag":0', '"topicSynFlag":3')
        qd = decode_topic_route(old.encode()).queueDatas[0]
        assert qd.topicSysFlag == 3
        assert b"topicSynFlag" not in encode_topic_route(decode_topic_route(old.encode()))

    def test_bare_keys_inside_strings_untouched(self):
        raw = b'{"a":"{0:\\"x\\",1:2}", 5 : "v",-3:"w"}'
        assert quote_bare_keys(raw) == b'{"a":"{0:\\"x\\",1:2}", "5" : "v","-3":"w"}'

    def test_wrong_shape_is_a_body_error(self):
        with pytest.raises(BodyDecodeError):
            decode_topic_route(b'{"queueDatas":7}')
        with pytest.raises(BodyDecodeError):
            decode_topic_route(b"{nope")


names = st.text(st.characters(min_codepoint=32, max_codepoint=0x2FFF), min_size=1, max_size=12)


@settings(deadline=None)
@given(st.builds(
    TopicRouteData,
    orderTopicConf=st.none() | names,
    queueDatas=st.lists(st.builds(QueueData, brokerName=names, readQueueNums=st.integers(0, 1024),
                                  writeQueueNums=st.integers(0, 1024), perm=st.integers(0, 15),
                                  topicSysFlag=st.integers(0, 3)), max_size=4),
    brokerDatas=st.lists(st.builds(BrokerData, cluster=names, brokerName=names,
                                   brokerAddrs=st.dictionaries(st.integers(0, 2**40), names, max_size=3)), max_size=4),
    filterServerTable=st.dictionaries(names, st.lists(names, max_size=2), max_size=2),
), st.booleans())
def test_route_round_trip(route, standard):
    assert decode_topic_route(encode_topic_route(route, standard_json=standard)) == route


def test_cluster_info_bare_keys():
    info = ClusterInfo(brokerAddrTable={"b1": ROUTE.brokerDatas[0]}, clusterAddrTable={"DefaultCluster": ["b1"]})
    raw = encode_cluster_info(info)
    assert raw == (b'{"brokerAddrTable":{"b1":{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"b1",'
                   b'"cluster":"DefaultCluster"}},"clusterAddrTable":{"DefaultCluster":["b1"]}}')
    assert decode_json(raw, ClusterInfo) == info


def _hand_compressed() -> bytes:
    def part(b: bytes) -> bytes:
        return struct.pack(">i", len(b)) + b
    raw = (part(b'{"counter":3,"timestamp":1700000000000}') + struct.pack(">i", 2)
           + part(b"TopicA 4 4 6 SINGLE_TAG") + part(b"TopicB 8 8 7 MULTI_TAG") + part(b'["10.0.0.1:1"]'))
    return zlib.compress(raw, 9)


REGISTER = RegisterBrokerBody(
    topicConfigSerializeWrapper=TopicConfigSerializeWrapper(
        topicConfigTable={
            "TopicA": TopicConfig(topicName="TopicA", readQueueNums=4, writeQueueNums=4, perm=6),
            "TopicB": TopicConfig(topicName="TopicB", readQueueNums=8, writeQueueNums=8, perm=7,
                                  topicFilterType="MULTI_TAG"),
        },
        dataVersion=DataVersion(timestamp=1700000000000, counter=3),
    ),
    filterServerList=["10.0.0.1:1"],
)


class TestRegisterBody:
    def test_compressed_decode_hand_built(self):
        assert decode_register_body(_hand_compressed(), compressed=True) == REGISTER

    def test_compressed_encode_matches_hand_built(self):
        assert encode_register_body(REGISTER, compressed=True) == _hand_compressed()

    def test_plain_json(self):
        raw = (b'{"filterServerList":[],"topicConfigSerializeWrapper":{"dataVersion":{"counter":1,"timestamp":5},'
               b'"topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":2,"topicFilterType":"SINGLE_TAG",'
               b'"topicName":"T","topicSysFlag":0,"writeQueueNums":2}}}}')
        body = decode_register_body(raw, compressed=False)
        assert body.topicConfigSerializeWrapper.topicConfigTable["T"].readQueueNums == 2
        assert encode_register_body(body) == raw

    @pytest.mark.parametrize("data", [b"", b"garbage", zlib.compress(b"\x00\x00"),
                                      zlib.compress(struct.pack(">i", 1 << 30)),
                                      zlib.compress(struct.pack(">i", 2) + b"{}" + struct.pack(">i", -1))])
    def test_bad_compressed(self, data):
        with pytest.raises(BodyDecodeError):
            decode_register_body(data, compressed=True)

    def test_inflate_bomb_refused(self):
        bomb = zlib.compress(b"\x00" * (70 * 1024 * 1024), 9)
        with pytest.raises(BodyDecodeError, match="inflates beyond"):
            decode_register_body(bomb, compressed=True)


def test_heartbeat_names_and_ordinals():
    java = (b'{"clientID":"10.0.0.1@123","producerDataSet":[{"groupName":"pg"}],"consumerDataSet":[{"groupName":"cg",'
            b'"consumeType":"CONSUME_PASSIVELY","messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_FIRST_OFFSET",'
            b'"unitMode":false,"subscriptionDataSet":[{"classFilterMode":false,"topic":"T","subString":"a || b",'
            b'"tagsSet":["a","b"],"codeSet":[97,98],"subVersion":1700000000000,"expressionType":"TAG"}]}]}')
    cpp = (b'{"clientID":"x","consumerDataSet":[{"groupName":"cg","consumeType":1,"messageModel":1,'
           b'"consumeFromWhere":4,"subscriptionDataSet":[{"topic":"T","subString":"*","codeSet":[0,0],'
           b'"subVersion":"1700000000000"}]}]}')
    a, b = decode_heartbeat(java), decode_heartbeat(cpp)
    for hb in (a, b):
        cd = hb.consumerDataSet[0]
        assert (cd.consumeType, cd.messageModel, cd.consumeFromWhere) == (
            "CONSUME_PASSIVELY", "CLUSTERING", "CONSUME_FROM_FIRST_OFFSET")
        assert cd.subscriptionDataSet[0].subVersion == 1700000000000
    assert a.producerDataSet[0].groupName == "pg"
    with pytest.raises(BodyDecodeError):
        decode_heartbeat(b'{"clientID":"x","consumerDataSet":[{"groupName":"g","consumeType":9}]}')


def test_lock_bodies():
    req = LockBatchRequestBody(consumerGroup="g", clientId="c", mqSet=[MessageQueue(topic="T", brokerName="b", queueId=1)])
    raw = encode_json(req)
    assert raw == b'{"clientId":"c","consumerGroup":"g","mqSet":[{"brokerName":"b","queueId":1,"topic":"T"}]}'
    assert decode_json(raw, LockBatchRequestBody) == req
    assert decode_json(b'{"lockOKMQSet":[{"topic":"T","brokerName":"b","queueId":1}]}', LockBatchResponseBody).lockOKMQSet == req.mqSet


def test_fastjson_string_escapes():
    r = TopicRouteData(brokerDatas=[BrokerData(cluster="a/b\t\x01\x7f😀", brokerName="n", brokerAddrs={})])
    assert b'"cluster":"a\\/b\\t\\u0001\\u007F\\uD83D\\uDE00"' in encode_topic_route(r, standard_json=True)
    assert '"cluster":"a/b\\t\\u0001\x7f😀"'.encode() in encode_topic_route(r)
