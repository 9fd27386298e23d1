"""NameServer in-process with a fake clock: expiry and table semantics without waiting."""
from __future__ import annotations

import asyncio

from shmq.namesrv import NamesrvConfig, NameServer, RouteTable
from shmq.protocol import RemotingClient, RequestCode, request
from shmq.protocol.bodies import (
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
    decode_topic_route,
    encode_register_body,
)
from shmq.protocol.headers import RegisterBrokerRequestHeader


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def wrapper(topics: dict[str, int], counter: int = 1) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper(
        topicConfigTable={t: TopicConfig(topicName=t, readQueueNums=q, writeQueueNums=q) for t, q in topics.items()},
        dataVersion=DataVersion(timestamp=counter, counter=counter),
    )


async def register(c: RemotingClient, name: str, addr: str, topics: dict[str, int], broker_id: int = 0) -> None:
    body = encode_register_body(RegisterBrokerBody(topicConfigSerializeWrapper=wrapper(topics)))
    h = RegisterBrokerRequestHeader(brokerName=name, brokerAddr=addr, clusterName="c", haServerAddr="",
                                    brokerId=broker_id)
    assert (await c.invoke(request(RequestCode.REGISTER_BROKER, h, body))).code == 0


def test_scan_expires_by_the_clock_and_closes_the_broker_connection():
    async def main():
        clock = Clock()
        cfg = NamesrvConfig(listenPort=0, brokerChannelExpiredTime=120_000, scanNotActiveBrokerInterval=3_600_000)
        async with NameServer(cfg, clock=clock) as ns:
            a, b = RemotingClient(ns.address), RemotingClient(ns.address)
            await register(a, "b1", "127.0.0.1:10911", {"T": 4})
            await register(b, "b2", "127.0.0.1:10921", {"T": 4})
            clock.t += 100
            await register(a, "b1", "127.0.0.1:10911", {"T": 4})
            clock.t += 20.5  # b2 silent 120.5 s, b1 20.5 s
            assert ns.scan_not_active_brokers() == 1
            assert sorted(ns.table.broker_live) == ["127.0.0.1:10911"]
            conn = b.connection
            await asyncio.wait_for(conn.wait_closed(), 2)  # Java closes the expired channel too
            r = await a.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T"))
            assert [q.brokerName for q in decode_topic_route(r.body).queueDatas] == ["b1"]
            await a.close()
            await b.close()
    asyncio.run(main())


def test_table_semantics():
    t = RouteTable()
    t.register_broker("c", "h:1", "b1", 0, "", wrapper({"A": 4, "B": 4}), [], "conn1", 0.0)
    # A re-registration without B keeps B (RocketMQ removes topics only with the broker).
    t.register_broker("c", "h:1", "b1", 0, "", wrapper({"A": 8}, counter=2), [], "conn1", 1.0)
    assert t.pickup_route("A").queueDatas[0].writeQueueNums == 8
    assert t.pickup_route("B") is not None
    # The same data version is not re-applied (only the liveness is refreshed).
    t.topic_queue["A"]["b1"].perm = 2
    t.register_broker("c", "h:1", "b1", 0, "", wrapper({"A": 16}, counter=2), [], "conn1", 2.0)
    assert t.pickup_route("A").queueDatas[0].writeQueueNums == 8
    # A slave's topic config never sets QueueData; a slave promoted to master replaces its old id.
    t.register_broker("c", "h:2", "b1", 1, "", wrapper({"S": 1}), [], "conn2", 2.0)
    assert t.pickup_route("S") is None
    t.register_broker("c", "h:2", "b1", 0, "", wrapper({"S": 1}, counter=3), [], "conn2", 3.0)
    assert t.broker_addr["b1"].brokerAddrs == {0: "h:2"}
    assert t.pickup_route("S") is not None
    # Closing the connection of an address no longer registered on it changes nothing.
    assert t.broker_of_connection("conn1") == "h:1"
    t.remove_broker_addr("h:2", "test")
    assert t.pickup_route("A") is None and t.cluster_addr == {}
    assert t.remove_broker_addr("h:9", "unknown") is False
