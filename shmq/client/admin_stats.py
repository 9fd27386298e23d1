"""The statistics and group administration part of :class:`shmq.client.admin.Admin`: what
mqadmin's topicStatus, consumerProgress, consumerConnection, producerConnection,
updateSubGroup, deleteSubGroup, getBrokerConfig, statsAll and cleanExpiredCQ ask a broker, with
RocketMQ 4.9's request codes and body shapes (TopicStatsTable, ConsumeStats,
ConsumerConnection, ProducerConnection, GroupList, SubscriptionGroupConfig, BrokerStatsData).

Where a broker answers REQUEST_CODE_NOT_SUPPORTED (3) to a statistics request, the per-queue
offset requests every broker serves are used instead, so the same table comes out.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field

from shmq.errors import BrokerError, ShmqError
from shmq.protocol import RequestCode, ResponseCode, request

NOT_SUPPORTED = int(ResponseCode.REQUEST_CODE_NOT_SUPPORTED)


def decode_mq_map(data: bytes, name: str) -> dict[tuple[str, str, int], dict]:
    """fastjson writes a map keyed by MessageQueue with the key objects in key position
    (``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}}``: not JSON). Returns
    {(topic, brokerName, queueId): value object} of the map named ``name``; the rest of the body
    is ignored."""
    text = data.decode("utf-8", "replace")
    dec = json.JSONDecoder()
    at = text.find(f'"{name}"')
    if at < 0:
        return {}
    pos = text.index("{", at) + 1
    out: dict[tuple[str, str, int], dict] = {}
    while True:
        while pos < len(text) and text[pos] in " \t\r\n,":
            pos += 1
        if pos >= len(text) or text[pos] == "}":
            return out
        key, pos = dec.raw_decode(text, pos)
        if isinstance(key, str):  # a standard-JSON writer: the key is the MessageQueue's text
            key = json.loads(key) if key.startswith("{") else {"topic": key}
        while text[pos] in " \t\r\n:":
            pos += 1
        val, pos = dec.raw_decode(text, pos)
        out[(key.get("topic", ""), key.get("brokerName", ""), int(key.get("queueId", 0)))] = val


@dataclass
class QueueStatus:
    topic: str
    broker_name: str
    queue_id: int
    min_offset: int
    max_offset: int
    last_update_ms: int = 0


@dataclass
class Connection:
    client_id: str
    client_addr: str
    language: str
    version: int


@dataclass
class GroupConnections:
    group: str
    connections: list[Connection] = field(default_factory=list)
    subscriptions: dict[str, str] = field(default_factory=dict)  # topic -> expression
    consume_type: str = ""
    message_model: str = ""
    consume_from_where: str = ""


def _connections(body: dict) -> list[Connection]:
    return [Connection(c.get("clientId", ""), c.get("clientAddr", ""), str(c.get("language", "")),
                       int(c.get("version", 0))) for c in body.get("connectionSet", [])]


def _json(data: bytes) -> dict:
    from shmq.protocol.bodies import quote_bare_keys
    try:
        return json.loads(data)
    except ValueError:
        return json.loads(quote_bare_keys(data))


class AdminStats:
    """Mixed into Admin: needs ``_invoke``, ``_offset``, ``masters``, ``route`` and ``queues``."""

    def brokers_of(self, topic: str) -> dict[str, str]:
        route = self.route(topic)
        return {bd.brokerName: bd.brokerAddrs[0] for bd in route.brokerDatas if 0 in bd.brokerAddrs}

    # ---- topics ---------------------------------------------------------------------------
    def topic_status(self, topic: str) -> list[QueueStatus]:
        """GET_TOPIC_STATS_INFO (202) on every broker of the topic; per-queue offsets otherwise."""
        rows: list[QueueStatus] = []
        for broker, addr in sorted(self.brokers_of(topic).items()):
            r = self._invoke(addr, request(RequestCode.GET_TOPIC_STATS_INFO, topic=topic))
            if r.code == NOT_SUPPORTED:
                rows += self._status_by_offsets(topic, broker, addr)
                continue
            r.raise_for_code()
            for (t, b, q), v in sorted(decode_mq_map(r.body, "offsetTable").items()):
                rows.append(QueueStatus(t or topic, b or broker, q, int(v.get("minOffset", 0)),
                                        int(v.get("maxOffset", 0)), int(v.get("lastUpdateTimestamp", 0))))
        return rows

    def _status_by_offsets(self, topic: str, broker: str, addr: str) -> list[QueueStatus]:
        out = []
        for b, a, q in self.queues(topic):
            if b != broker:
                continue
            lo = self._offset(addr, RequestCode.GET_MIN_OFFSET, topic=topic, queueId=q)
            hi = self._offset(addr, RequestCode.GET_MAX_OFFSET, topic=topic, queueId=q)
            out.append(QueueStatus(topic, broker, q, max(lo, 0), max(hi, 0)))
        return out

    def consumed_by(self, topic: str) -> list[str]:
        """QUERY_TOPIC_CONSUME_BY_WHO (300): the groups with offsets or members on ``topic``."""
        groups: set[str] = set()
        for addr in self.brokers_of(topic).values():
            r = self._invoke(addr, request(RequestCode.QUERY_TOPIC_CONSUME_BY_WHO, topic=topic)).raise_for_code()
            groups.update(_json(r.body).get("groupList", []))
        return sorted(groups)

    # ---- groups ---------------------------------------------------------------------------
    def consume_stats(self, group: str, topic: str | None = None):
        """GET_CONSUME_STATS (208) on every master: [QueueProgress]; falls back to the offset
        requests (Admin.consumer_progress) where a broker does not serve 208."""
        from .admin import QueueProgress
        rows, fallback = [], False
        for broker, addr in sorted(self.masters().items()):
            ext = {"consumerGroup": group, **({"topic": topic} if topic else {})}
            r = self._invoke(addr, request(RequestCode.GET_CONSUME_STATS, **ext))
            if r.code == NOT_SUPPORTED:
                fallback = True
                continue
            if r.code == ResponseCode.CONSUMER_NOT_ONLINE or r.code == ResponseCode.SUBSCRIPTION_GROUP_NOT_EXIST:
                continue
            r.raise_for_code()
            for (t, b, q), v in sorted(decode_mq_map(r.body, "offsetTable").items()):
                rows.append(QueueProgress(t, b or broker, q, int(v.get("brokerOffset", 0)),
                                          int(v.get("consumerOffset", -1))))
        if fallback:
            have = {(r.topic, r.broker_name, r.queue_id) for r in rows}
            rows += [r for r in self.consumer_progress(group, [topic] if topic else None)
                     if (r.topic, r.broker_name, r.queue_id) not in have]
        return rows

    def consumer_connections(self, group: str) -> GroupConnections:
        """GET_CONSUMER_CONNECTION_LIST (203) from the first master that knows the group."""
        last: ShmqError | None = None
        for addr in self.masters().values():
            r = self._invoke(addr, request(RequestCode.GET_CONSUMER_CONNECTION_LIST, consumerGroup=group))
            if r.code != 0:
                last = BrokerError(r.code, r.remark or "")
                continue
            b = _json(r.body)
            subs = {t: s.get("subString", "*") for t, s in b.get("subscriptionTable", {}).items()}
            return GroupConnections(group, _connections(b), subs, str(b.get("consumeType", "")),
                                    str(b.get("messageModel", "")), str(b.get("consumeFromWhere", "")))
        raise last or ShmqError("no broker")

    def producer_connections(self, group: str, topic: str | None = None) -> list[Connection]:
        """GET_PRODUCER_CONNECTION_LIST (204) from every master (or the topic's brokers)."""
        out: dict[str, Connection] = {}
        addrs = self.brokers_of(topic).values() if topic else self.masters().values()
        for addr in addrs:
            r = self._invoke(addr, request(RequestCode.GET_PRODUCER_CONNECTION_LIST, producerGroup=group))
            if r.code == NOT_SUPPORTED:
                r.raise_for_code()
            if r.code != 0:
                continue
            for c in _connections(_json(r.body)):
                out[c.client_id] = c
        return list(out.values())

    def update_sub_group(self, group: str, cluster: str | None = None, broker_addr: str | None = None,
                         **settings) -> list[str]:
        """UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200): a SubscriptionGroupConfig body."""
        cfg = {"groupName": group, "consumeEnable": True, "consumeFromMinEnable": False,
               "consumeBroadcastEnable": True, "retryQueueNums": 1, "retryMaxTimes": 16, "brokerId": 0,
               "whichBrokerWhenConsumeSlowly": 1, "notifyConsumerIdsChangedEnable": True, **settings}
        addrs = [broker_addr] if broker_addr else list(self.masters(cluster).values())
        for addr in addrs:
            self._invoke(addr, request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                       body=json.dumps(cfg).encode())).raise_for_code()
        return addrs

    def delete_sub_group(self, group: str, cluster: str | None = None, broker_addr: str | None = None,
                         clean_offset: bool = True) -> list[str]:
        """DELETE_SUBSCRIPTIONGROUP (207), with RocketMQ 5's cleanOffset."""
        addrs = [broker_addr] if broker_addr else list(self.masters(cluster).values())
        for addr in addrs:
            self._invoke(addr, request(RequestCode.DELETE_SUBSCRIPTIONGROUP, groupName=group,
                                       cleanOffset=str(clean_offset).lower())).raise_for_code()
        return addrs

    # ---- brokers --------------------------------------------------------------------------
    def broker_config(self, addr: str) -> dict[str, str]:
        """GET_BROKER_CONFIG (26): the broker's settings (a Java properties text body)."""
        from shmq.protocol import javaprops
        r = self._invoke(addr, request(RequestCode.GET_BROKER_CONFIG)).raise_for_code()
        return dict(javaprops.loads(r.body.decode("utf-8", "replace")))

    def clean_expired_cq(self, cluster: str | None = None, broker_addr: str | None = None) -> dict[str, bool]:
        """CLEAN_EXPIRED_CONSUMEQUEUE (306) on one broker or every master of a cluster."""
        addrs = [broker_addr] if broker_addr else list(self.masters(cluster).values())
        out = {}
        for addr in addrs:
            r = self._invoke(addr, request(RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE))
            if r.code == NOT_SUPPORTED:
                r.raise_for_code()
            out[addr] = r.code == 0
        return out

    def stats_data(self, addr: str, stats_name: str, stats_key: str) -> dict | None:
        """VIEW_BROKER_STATS_DATA (315): {"statsMinute": {"sum", "tps", "avgpt"}, ...}, or None
        when the broker keeps no such statistics."""
        r = self._invoke(addr, request(RequestCode.VIEW_BROKER_STATS_DATA, statsName=stats_name, statsKey=stats_key))
        return _json(r.body) if r.code == 0 and r.body else None
