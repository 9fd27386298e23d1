"""Both peers of the oracle tests start, register and route a topic: what the other oracle tests
take for granted."""
from __future__ import annotations

from shmq.protocol import RequestCode, request
from shmq.protocol.bodies import decode_json

from .conftest import unique


def test_broker_registered_and_topic_routed(target):
    with target.client("namesrv") as c:
        r = c.invoke(request(RequestCode.GET_BROKER_CLUSTER_INFO))
    assert r.code == 0
    info = decode_json(r.body, dict)
    assert target.broker_name in info["clusterAddrTable"][target.cluster]
    topic = unique("Smoke")
    target.create_topic(topic, queues=3)
    with target.client("namesrv") as c:
        route = decode_json(c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)).body, dict)
    assert [q["readQueueNums"] for q in route["queueDatas"]] == [3]
    assert route["brokerDatas"][0]["brokerAddrs"]["0"] == target.broker
