"""Admin: what RocketMQ's mqadmin does, on the same wire (the ``shmq`` command's subcommands
use it): topics, clusters, consumer progress, message query and view, offset reset, and
re-sending dead letters. Blocking, one request at a time: tooling, not a hot path."""
from __future__ import annotations

import time
from dataclasses import dataclass

from shmq.errors import BrokerError, ShmqError
from shmq.message.msgid import decode_offset_msg_id
from shmq.message.names import (DLQ_PREFIX, ORIGIN_MESSAGE_ID, RETRY_TOPIC, SYSTEM_PROPERTIES, TBW102, UNIQ_KEY,
                                dlq_topic)
from shmq.protocol import RequestCode, ResponseCode, SyncRemotingClient, request
from shmq.protocol.acl_sign import credentials
from shmq.protocol.bodies import (ClusterInfo, KVTable, TopicList, TopicRouteData, decode_json,
                                  decode_reset_offset_body, decode_topic_route)
from shmq.protocol.headers import CreateTopicRequestHeader

from .admin_stats import AdminStats
from .message import MessageExt, messages_from_records

PERM_READ_WRITE = 6
#: CONSUMER_NOT_ONLINE, SUBSCRIPTION_GROUP_NOT_EXIST: no running consumer to tell
_NOT_ONLINE = (206, 26)


@dataclass
class QueueProgress:
    topic: str
    broker_name: str
    queue_id: int
    broker_offset: int
    consumer_offset: int

    @property
    def lag(self) -> int:
        return max(0, self.broker_offset - max(self.consumer_offset, 0))


class Admin(AdminStats):
    def __init__(self, namesrv: str = "127.0.0.1:9876", timeout: float = 5.0, *,
                 access_key: str | None = None, secret_key: str | None = None, security_token: str | None = None):
        self.namesrv_addrs = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
        self.timeout = timeout
        creds = credentials(access_key, secret_key, security_token)  # ACL: sign every request
        self._rpc_hook = creds.sign if creds is not None else None
        self._conns: dict[str, SyncRemotingClient] = {}

    def close(self) -> None:
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def __enter__(self) -> "Admin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ---- plumbing -----------------------------------------------------------------------
    def _invoke(self, addr: str, cmd):
        c = self._conns.get(addr)
        if c is None:
            c = self._conns[addr] = SyncRemotingClient(addr, timeout=self.timeout, rpc_hook=self._rpc_hook)
        try:
            return c.invoke(cmd)
        except ShmqError:
            self._conns.pop(addr, None)
            c.close()
            raise

    def _namesrv(self, cmd):
        last = None
        for addr in self.namesrv_addrs:
            try:
                return self._invoke(addr, cmd)
            except ShmqError as e:
                last = e
        raise last or ShmqError("no NameServer address")

    # ---- clusters and topics --------------------------------------------------------------
    def cluster_info(self) -> ClusterInfo:
        r = self._namesrv(request(RequestCode.GET_BROKER_CLUSTER_INFO)).raise_for_code()
        return decode_json(r.body, ClusterInfo)

    def masters(self, cluster: str | None = None) -> dict[str, str]:
        """broker name -> master address (of one cluster, or all)."""
        info = self.cluster_info()
        names = set(info.clusterAddrTable.get(cluster, [])) if cluster else set(info.brokerAddrTable)
        return {n: bd.brokerAddrs[0] for n, bd in info.brokerAddrTable.items() if n in names and 0 in bd.brokerAddrs}

    def runtime_info(self, addr: str) -> dict[str, str]:
        r = self._invoke(addr, request(RequestCode.GET_BROKER_RUNTIME_INFO)).raise_for_code()
        return decode_json(r.body, KVTable).table

    def topic_list(self) -> list[str]:
        r = self._namesrv(request(RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)).raise_for_code()
        return sorted(decode_json(r.body, TopicList).topicList)

    def route(self, topic: str) -> TopicRouteData:
        r = self._namesrv(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)).raise_for_code()
        return decode_topic_route(r.body)

    def create_topic(self, topic: str, queues: int = 4, perm: int = PERM_READ_WRITE,
                     cluster: str | None = None, order: bool = False, broker_addr: str | None = None) -> list[str]:
        masters = {broker_addr: broker_addr} if broker_addr else self.masters(cluster)
        if not masters:
            raise ShmqError(f"no broker in {'cluster ' + cluster if cluster else 'any cluster'}")
        h = CreateTopicRequestHeader(topic=topic, defaultTopic=TBW102, readQueueNums=queues,
                                     writeQueueNums=queues, perm=perm, topicFilterType="SINGLE_TAG", order=order)
        for addr in masters.values():
            self._invoke(addr, request(RequestCode.UPDATE_AND_CREATE_TOPIC, h)).raise_for_code()
        return sorted(masters)

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        for addr in self.masters(cluster).values():
            self._invoke(addr, request(RequestCode.DELETE_TOPIC_IN_BROKER, topic=topic)).raise_for_code()
        for addr in self.namesrv_addrs:
            self._invoke(addr, request(RequestCode.DELETE_TOPIC_IN_NAMESRV, topic=topic)).raise_for_code()

    def queues(self, topic: str):
        route = self.route(topic)
        addrs = {bd.brokerName: bd.brokerAddrs.get(0) for bd in route.brokerDatas}
        for qd in route.queueDatas:
            addr = addrs.get(qd.brokerName)
            if addr:
                for q in range(qd.readQueueNums):
                    yield qd.brokerName, addr, q

    # ---- offsets --------------------------------------------------------------------------
    def _offset(self, addr: str, code: int, **kw) -> int:
        r = self._invoke(addr, request(code, **kw))
        if r.code == ResponseCode.QUERY_NOT_FOUND:
            return -1
        r.raise_for_code()
        return int(r.ext_fields.get("offset", -1))

    def offset_by_time(self, addr: str, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """SEARCH_OFFSET_BY_TIMESTAMP (29): the first offset stored at or after the time."""
        return max(self._offset(addr, RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic=topic, queueId=queue_id,
                                timestamp=timestamp_ms), 0)

    def consumer_progress(self, group: str, topics: list[str] | None = None) -> list[QueueProgress]:
        """Per queue: the broker's max offset, the group's committed offset, the lag. Without
        ``topics``: every topic the group has committed offsets on, and its retry topic."""
        rows = []
        candidates = topics or [t for t in self.topic_list() if not t.startswith(DLQ_PREFIX)]
        for topic in candidates:
            try:
                queues = list(self.queues(topic))
            except BrokerError:
                continue
            found = []
            for broker, addr, q in queues:
                cons = self._offset(addr, RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=topic, queueId=q)
                found.append(QueueProgress(topic, broker, q,
                                           self._offset(addr, RequestCode.GET_MAX_OFFSET, topic=topic, queueId=q), cons))
            if topics or any(r.consumer_offset >= 0 for r in found):
                rows += found
        return rows

    def reset_offset(self, group: str, topic: str, timestamp_ms: int, progress=None) -> dict[tuple[str, int], int]:
        """Move the group's offsets on every queue of ``topic`` to the first message stored at or
        after ``timestamp_ms`` (forwards or backwards). The broker tells the group's running
        consumers (RESET_CONSUMER_CLIENT_OFFSET) so they continue from there. Where the group
        has no consumer online (206, or RocketMQ 4.9's "consumer group not exist"), the offsets
        are committed queue by queue instead, as mqadmin's resetOffsetByTimestampOld does."""
        out = {}
        brokers: dict[str, str] = {}
        queues = list(self.queues(topic))
        for broker, addr, q in queues:
            brokers[broker] = addr
        done = 0
        for broker, addr in brokers.items():
            r = self._invoke(addr, request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, topic=topic, group=group,
                                           timestamp=timestamp_ms, isForce=True))
            if r.code in _NOT_ONLINE or (r.code == ResponseCode.SYSTEM_ERROR and "not exist" in (r.remark or "")):
                for b, a, q in queues:
                    if b == broker:
                        off = self.offset_by_time(a, topic, q, timestamp_ms)
                        self._invoke(a, request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup=group, topic=topic,
                                                queueId=q, commitOffset=off)).raise_for_code()
                        out[(b, q)] = off
                        done += 1
                        if progress is not None:
                            progress(done)
                continue
            r.raise_for_code()
            for (_, b, qid), off in decode_reset_offset_body(r.body).items():
                out[(b, qid)] = off
                done += 1
            if progress is not None:
                progress(done)
        return out

    # ---- messages -------------------------------------------------------------------------
    def query_by_key(self, topic: str, key: str, max_num: int = 32, begin_ms: int = 0,
                     end_ms: int | None = None, unique: bool = False) -> list[MessageExt]:
        end_ms = end_ms if end_ms is not None else int(time.time() * 1000) + 1000
        out = []
        for broker, addr in self.masters().items():
            r = self._invoke(addr, request(RequestCode.QUERY_MESSAGE, topic=topic, key=key, maxNum=max_num,
                                           beginTimestamp=begin_ms, endTimestamp=end_ms,
                                           _UNIQUE_KEY_QUERY="true" if unique else "false"))
            if r.code == ResponseCode.QUERY_NOT_FOUND:
                continue
            r.raise_for_code()
            out += [m for m in messages_from_records(r.body, broker)
                    if key in m.keys or m.msg_id == key or m.properties.get(UNIQ_KEY) == key]
        return sorted(out, key=lambda m: m.store_timestamp)

    def view(self, msg_id: str, topic: str | None = None) -> MessageExt:
        """By offset msgId (store host + commit-log offset), or by UNIQ_KEY when ``topic`` is given."""
        try:
            host, port, offset = decode_offset_msg_id(msg_id)
        except (ValueError, ShmqError):
            host = None
        if host is not None:
            # a UNIQ_KEY is 32 hex characters too: when the "address" in it answers nothing,
            # it was not an offset msgId
            try:
                r = self._invoke(f"{host}:{port}", request(RequestCode.VIEW_MESSAGE_BY_ID, offset=offset))
                msgs = messages_from_records(r.body, "") if r.code == 0 else []
                if msgs and msgs[0].offset_msg_id == msg_id.upper():
                    return msgs[0]
            except ShmqError:
                pass
        if topic:
            found = self.query_by_key(topic, msg_id, unique=True)
            if found:
                return found[-1]
        raise ShmqError(f"message {msg_id} not found")

    def read_queue(self, topic: str, broker_addr: str, queue_id: int, offset: int, max_num: int = 32):
        """Raw pull (no group offsets): (messages, next offset)."""
        r = self._invoke(broker_addr, request(
            RequestCode.PULL_MESSAGE, consumerGroup="TOOLS_CONSUMER", topic=topic, queueId=queue_id,
            queueOffset=offset, maxMsgNums=max_num, sysFlag=4, commitOffset=0, suspendTimeoutMillis=0,
            subscription="*", subVersion=0, expressionType="TAG"))
        nxt = int(r.ext_fields.get("nextBeginOffset", offset))
        if r.code != 0:
            return [], nxt
        return messages_from_records(r.body, ""), nxt

    def read_range(self, topic: str, broker_addr: str, queue_id: int, begin: int, end: int | None = None):
        """Every message of one queue in [begin, end) (end None: up to the queue's end), read
        32 at a time: mqadmin's consumeMessage and printMsg."""
        off = begin
        while end is None or off < end:
            msgs, nxt = self.read_queue(topic, broker_addr, queue_id, off)
            if not msgs or nxt <= off:
                return
            for m in msgs:
                if end is None or m.queue_offset < end:
                    yield m
            off = nxt

    def dlq_resend(self, group: str, producer, msg_id: str | None = None, progress=None) -> int:
        """Put dead letters of ``group`` back to their original topic (RETRY_TOPIC, or the
        topic they were consumed from). With ``msg_id``: only that message."""
        from .message import Message
        dlq = dlq_topic(group)
        n = 0
        try:
            queues = list(self.queues(dlq))
        except BrokerError:
            return 0
        for broker, addr, q in queues:
            off = 0
            while True:
                msgs, nxt = self.read_queue(dlq, addr, q, off)
                if not msgs:
                    break
                for m in msgs:
                    if msg_id and msg_id not in (m.msg_id, m.offset_msg_id, m.properties.get(ORIGIN_MESSAGE_ID)):
                        continue
                    origin = m.properties.get(RETRY_TOPIC) or m.topic
                    if origin.startswith("%"):
                        continue
                    user_props = {k: v for k, v in m.properties.items()
                                  if k not in SYSTEM_PROPERTIES}
                    producer.send(Message(origin, m.body, m.tags, m.keys, user_props))
                    n += 1
                    if progress is not None:
                        progress(n)
                off = nxt
        return n
