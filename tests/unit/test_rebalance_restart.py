"""A consumer keeps its queues through a rebalance round that finds the broker not knowing
it yet (the broker restarted and has no heartbeat from it) or the route gone for a moment
(the broker re-registering): found by ``shmq chaos``, where every consumer stopped for up
to one heartbeat period (30 s) after each broker kill. RocketMQ's rebalanceByTopic keeps its
process queues in both cases; the consumer also heartbeats at once so the next round can
allocate again."""
from __future__ import annotations

import asyncio

from shmq.client.consumer_core import ConsumerCore
from shmq.client.route import MessageQueue
from shmq.errors import TopicNotExist

QUEUES = [MessageQueue("T", "b", q) for q in range(4)]


class FakeInstance:
    client_id = "me"

    def __init__(self):
        self.cids = ["me"]
        self.route_ok = True
        self.heartbeats = 0

    async def subscribe_queues(self, topic):
        if not self.route_ok:
            raise TopicNotExist(17, f"No route info of this topic: {topic}")
        return list(QUEUES)

    async def heartbeat_all(self):
        self.heartbeats += 1


def _consumer() -> tuple[ConsumerCore, FakeInstance]:
    c = ConsumerCore("g", consume_from="FIRST_OFFSET")
    c.subscribe("T", "*")
    inst = FakeInstance()
    c.instance = inst
    c._running = True

    async def ids(topic):
        return list(inst.cids)

    async def start_offset(mq):
        return 0

    async def start_pulling(pq):
        pass

    async def removed(pq):
        pass
    c._consumer_ids, c._start_offset, c._start_pulling, c._queue_removed = ids, start_offset, start_pulling, removed
    return c, inst


def test_queues_kept_while_the_restarted_broker_does_not_know_the_consumer():
    c, inst = _consumer()
    asyncio.run(c.rebalance())
    assert set(c.pqs) == set(QUEUES)
    held = dict(c.pqs)
    inst.cids = []                                    # the broker restarted: no heartbeat from us yet
    asyncio.run(c.rebalance())
    assert c.pqs == held and not any(pq.dropped for pq in held.values())
    assert inst.heartbeats == 1                       # and it was told at once
    inst.cids = ["me", "other"]                       # then a normal round shares the queues
    asyncio.run(c.rebalance())
    assert len(c.pqs) == 2


def test_queues_kept_while_the_route_is_missing():
    c, inst = _consumer()
    asyncio.run(c.rebalance())
    held = dict(c.pqs)
    inst.route_ok = False
    asyncio.run(c.rebalance())
    assert c.pqs == held and not any(pq.dropped for pq in held.values())
