"""A third-party RocketMQ 4.x client (ali-ons, from npm) asks shmq-namesrv for routes.

ali-ons sends version 121 and language JAVA, so it gets the pre-4.9.4 body with bare broker-id
keys, and parses it with its own ``JSON2`` (eval-based) parser, as it does against RocketMQ.
"""
from __future__ import annotations

import pytest

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper, encode_register_body
from shmq.protocol.headers import RegisterBrokerRequestHeader
from shmq.protocol.message import masked_crc32

from .conftest import run_ons_client as ons


@pytest.fixture
def registered(namesrv):
    """Two masters and a slave, registered over persistent connections as brokers do."""
    clients = []
    for name, addr, bid, topics in [
        ("broker-a", "127.0.0.1:10911", 0, {"TopicTest": 4, "Orders": 8}),
        ("broker-a", "127.0.0.1:10931", 1, {"TopicTest": 4, "Orders": 8}),
        ("broker-b", "127.0.0.1:10921", 0, {"TopicTest": 2}),
    ]:
        body = encode_register_body(RegisterBrokerBody(topicConfigSerializeWrapper=TopicConfigSerializeWrapper(
            topicConfigTable={t: TopicConfig(topicName=t, readQueueNums=q, writeQueueNums=q) for t, q in topics.items()})),
            compressed=True)
        h = RegisterBrokerRequestHeader(brokerName=name, brokerAddr=addr, clusterName="DefaultCluster",
                                        haServerAddr="", brokerId=bid, compressed=True, bodyCrc32=masked_crc32(body))
        c = SyncRemotingClient(namesrv.addr)
        assert c.invoke(request(RequestCode.REGISTER_BROKER, h, body)).code == 0
        clients.append(c)
    yield namesrv
    for c in clients:
        c.close()


def test_ali_ons_reads_the_route_rocketmq_would_give(registered):
    ev = ons("route", "--namesrv", registered.addr, "--topic", "TopicTest")
    assert ev[-1] == {"event": "done"}
    r = ev[0]
    assert r["ok"] is True and r["version"] == 121 and r["language"] == "JAVA"
    # Exactly a 4.9.8 NameServer's bytes for a version-121 client: bare Long keys.
    assert r["raw"] == (
        '{"brokerDatas":['
        '{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10931"},"brokerName":"broker-a","cluster":"DefaultCluster"},'
        '{"brokerAddrs":{0:"127.0.0.1:10921"},"brokerName":"broker-b","cluster":"DefaultCluster"}],'
        '"filterServerTable":{},"queueDatas":['
        '{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4},'
        '{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}'
    )
    # And ali-ons' own parser understood it (keys come back as strings from a JS object).
    route = r["route"]
    assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [
        {"0": "127.0.0.1:10911", "1": "127.0.0.1:10931"}, {"0": "127.0.0.1:10921"}]
    assert [(q["brokerName"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] == [
        ("broker-a", 4, 6), ("broker-b", 2, 6)]


def test_ali_ons_gets_topic_not_exist(registered):
    ev = ons("route", "--namesrv", registered.addr, "--topic", "NoSuchTopic")
    assert ev[0]["ok"] is False and ev[0]["code"] == 17
    assert ev[0]["message"].startswith("No topic route info in name server for the topic: NoSuchTopic")
