"""Route data turned into what producers and consumers use: the writable queues of master
brokers (publish) and the readable queues (subscribe), as RocketMQ's MQClientInstance does
(topicRouteData2TopicPublishInfo / topicRouteData2TopicSubscribeInfo)."""
from __future__ import annotations

from dataclasses import dataclass, field

from shmq.protocol.bodies import TopicRouteData

from .message import MessageQueue

PERM_READ, PERM_WRITE = 4, 2


@dataclass
class TopicPublishInfo:
    topic: str
    queues: list[MessageQueue] = field(default_factory=list)
    order: bool = False
    via_default: bool = False  # routed through TBW102: the broker creates the topic on first send


def publish_info(topic: str, route: TopicRouteData, *, max_queues: int | None = None,
                 via_default: bool = False) -> TopicPublishInfo:
    info = TopicPublishInfo(topic, via_default=via_default)
    masters = {bd.brokerName for bd in route.brokerDatas if 0 in bd.brokerAddrs}
    if route.orderTopicConf:
        info.order = True
        for part in route.orderTopicConf.split(";"):
            name, _, n = part.partition(":")
            if n.isdigit():
                info.queues += [MessageQueue(topic, name, i) for i in range(int(n))]
        return info
    for qd in sorted(route.queueDatas, key=lambda q: q.brokerName):
        if not qd.perm & PERM_WRITE or qd.brokerName not in masters:
            continue
        n = qd.writeQueueNums if max_queues is None else min(max_queues, qd.writeQueueNums)
        info.queues += [MessageQueue(topic, qd.brokerName, i) for i in range(n)]
    return info


def subscribe_queues(topic: str, route: TopicRouteData) -> list[MessageQueue]:
    out = []
    for qd in route.queueDatas:
        if qd.perm & PERM_READ:
            out += [MessageQueue(topic, qd.brokerName, i) for i in range(qd.readQueueNums)]
    return sorted(out)
