"""Single requests on a plain :class:`SyncRemotingClient`, below any client library: create a
topic, send one message, pull one batch, read a topic's every record. What the wire tests and
``shmq chaos`` (its probe and its final drain) use to look at a broker without a producer's
retries or a consumer's offsets in between; the RocketMQ header classes do the encoding."""
from __future__ import annotations

import time

from .client import SyncRemotingClient
from .codes import RequestCode
from .command import request
from .headers import (CreateTopicRequestHeader, PullMessageRequestHeader, SendMessageRequestHeader,
                      send_header_to_v2)


def create_topic(c: SyncRemotingClient, topic: str, queues: int = 4, perm: int = 6):
    h = CreateTopicRequestHeader(topic=topic, defaultTopic="TBW102", readQueueNums=queues, writeQueueNums=queues,
                                 perm=perm, topicFilterType="SINGLE_TAG")
    return c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h))


def send(c: SyncRemotingClient, topic: str, body: bytes, queue_id: int = 0, tags: str | None = None,
         keys: str | None = None, v2: bool = True, props: str | None = None, default_topic: str = "TBW102",
         timeout: float | None = None):
    p = props if props is not None else ""
    if tags:
        p += f"TAGS\x01{tags}\x02"
    if keys:
        p += f"KEYS\x01{keys}\x02"
    h = SendMessageRequestHeader(producerGroup="pg", topic=topic, defaultTopic=default_topic,
                                 defaultTopicQueueNums=4, queueId=queue_id, sysFlag=0,
                                 bornTimestamp=int(time.time() * 1000), flag=0, properties=p or None)
    if v2:
        cmd = request(RequestCode.SEND_MESSAGE_V2, send_header_to_v2(h), body)
    else:
        cmd = request(RequestCode.SEND_MESSAGE, h, body)
    return c.invoke(cmd, timeout)


def pull(c: SyncRemotingClient, topic: str, queue_id: int, offset: int, group: str = "cg",
         suspend_ms: int = 0, sub: str | None = "*", max_nums: int = 32, timeout: float | None = None):
    sysflag = (2 if suspend_ms else 0) | (4 if sub is not None else 0)
    h = PullMessageRequestHeader(consumerGroup=group, topic=topic, queueId=queue_id, queueOffset=offset,
                                 maxMsgNums=max_nums, sysFlag=sysflag, commitOffset=0,
                                 suspendTimeoutMillis=suspend_ms, subVersion=0, subscription=sub)
    return c.invoke(request(RequestCode.PULL_MESSAGE, h), timeout)


def pull_all(addr: str, topic: str, queues: int, group: str = "cg", max_nums: int = 32) -> list[bytes]:
    """Every message body of ``topic`` on the broker at ``addr``, queue by queue, from offset 0
    to the end (a pull answered with anything but FOUND ends a queue)."""
    from shmq.message.record import decode_record
    out: list[bytes] = []
    with SyncRemotingClient(addr, timeout=5) as c:
        for q in range(queues):
            off = 0
            while True:
                r = pull(c, topic, q, off, group=group, max_nums=max_nums)
                if r.code != 0:
                    break
                body = r.body
                pos = 0
                while pos < len(body):
                    size = int.from_bytes(body[pos:pos + 4], "big")
                    out.append(bytes(decode_record(memoryview(body)[pos:pos + size]).body))
                    pos += size
                off = int(r.ext_fields["nextBeginOffset"])
    return out
