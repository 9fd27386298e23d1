"""Bodies of the admin requests mqadmin and the consoles send (RocketMQ 4.9.8 shapes).

Java writes them with fastjson (``RemotingSerializable.encode``): fields sorted by name, nulls
left out. Several are maps keyed by ``MessageQueue`` objects, which fastjson writes as JSON
objects in key position (``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"t"}:{...}}}``):
not JSON, but what every Java client parses; :func:`mq_table` writes that form.

=========================================  ====================================================
request (code)                             body
=========================================  ====================================================
GET_TOPIC_STATS_INFO (202)                 TopicStatsTable: offsetTable MQ -> {minOffset, maxOffset,
                                           lastUpdateTimestamp}
GET_CONSUME_STATS (208)                    ConsumeStats: consumeTps, offsetTable MQ -> {brokerOffset,
                                           consumerOffset, lastTimestamp}
GET_CONSUMER_CONNECTION_LIST (203)         ConsumerConnection: connectionSet, consumeFromWhere,
                                           consumeType, messageModel, subscriptionTable
GET_PRODUCER_CONNECTION_LIST (204)         ProducerConnection: connectionSet
QUERY_TOPIC_CONSUME_BY_WHO (300)           GroupList: groupList
VIEW_BROKER_STATS_DATA (315)               BrokerStatsData: statsDay/Hour/Minute {avgpt, sum, tps}
UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200)  SubscriptionGroupConfig (request body)
GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201)     {dataVersion, subscriptionGroupTable: name -> config}
=========================================  ====================================================
"""
from __future__ import annotations

from typing import Any

import msgspec

from .bodies import _fj_str, fastjson_dumps


def mq_key(topic: str, broker: str, queue_id: int) -> str:
    return f'{{"brokerName":{_fj_str(broker, False)},"queueId":{queue_id},"topic":{_fj_str(topic, False)}}}'


def mq_table(table: dict[tuple[str, str, int], Any]) -> str:
    """A ``Map<MessageQueue, V>`` as fastjson writes it; ``table`` maps (topic, broker, queue id)
    to the value (a dict or a number)."""
    parts = [mq_key(t, b, q) + ":" + fastjson_dumps(v).decode() for (t, b, q), v in sorted(table.items())]
    return "{" + ",".join(parts) + "}"


def encode_topic_stats(table: dict[tuple[str, str, int], tuple[int, int, int]]) -> bytes:
    """(topic, broker, queue) -> (min offset, max offset, last update timestamp)."""
    rows = {k: {"lastUpdateTimestamp": ts, "maxOffset": mx, "minOffset": mn} for k, (mn, mx, ts) in table.items()}
    return ('{"offsetTable":' + mq_table(rows) + "}").encode()


def encode_consume_stats(table: dict[tuple[str, str, int], tuple[int, int, int]], tps: float) -> bytes:
    """(topic, broker, queue) -> (broker offset, consumer offset, last timestamp)."""
    rows = {k: {"brokerOffset": b, "consumerOffset": c, "lastTimestamp": ts} for k, (b, c, ts) in table.items()}
    return ('{"consumeTps":' + repr(float(tps)) + ',"offsetTable":' + mq_table(rows) + "}").encode()


class Connection(msgspec.Struct, kw_only=True):
    clientId: str
    clientAddr: str
    language: str = "JAVA"
    version: int = 0


class ConsumerConnection(msgspec.Struct, kw_only=True):
    connectionSet: list[Connection] = msgspec.field(default_factory=list)
    subscriptionTable: dict[str, Any] = msgspec.field(default_factory=dict)
    consumeType: str | None = None
    messageModel: str | None = None
    consumeFromWhere: str | None = None


class ProducerConnection(msgspec.Struct, kw_only=True):
    connectionSet: list[Connection] = msgspec.field(default_factory=list)


class GroupList(msgspec.Struct, kw_only=True):
    groupList: list[str] = msgspec.field(default_factory=list)


class SubscriptionGroupConfig(msgspec.Struct, kw_only=True):
    """RocketMQ 4.9.8's SubscriptionGroupConfig with its defaults."""
    groupName: str
    consumeEnable: bool = True
    consumeFromMinEnable: bool = True
    consumeBroadcastEnable: bool = True
    retryQueueNums: int = 1
    retryMaxTimes: int = 16
    brokerId: int = 0
    whichBrokerWhenConsumeSlowly: int = 1
    notifyConsumerIdsChangedEnable: bool = True


def encode_stats_data(minute: tuple[int, float], hour: tuple[int, float], day: tuple[int, float]) -> bytes:
    """BrokerStatsData: (sum, tps) per window; shmq measures no put latency, avgpt is 0."""
    def item(s: tuple[int, float]) -> dict:
        return {"avgpt": 0.0, "sum": s[0], "tps": s[1]}
    return fastjson_dumps({"statsDay": item(day), "statsHour": item(hour), "statsMinute": item(minute)})


def encode_reset_offset_body_for_c(table: dict[tuple[str, str, int], int]) -> bytes:
    """ResetOffsetBodyForC, what the broker sends C++ consumers instead of ResetOffsetBody: a
    list of MessageQueueForC {brokerName, offset, queueId, topic} (no object keys)."""
    rows = [{"brokerName": b, "offset": o, "queueId": q, "topic": t} for (t, b, q), o in sorted(table.items())]
    return fastjson_dumps({"offsetTable": rows})
