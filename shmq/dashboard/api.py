"""What the dashboard's pages ask, answered with shmq's admin client on the RocketMQ wire
(NameServer and broker requests only; the store files are never opened). Every method returns
plain JSON-able data. One :class:`~shmq.client.admin.Admin` is shared under a lock: it keeps
one connection per address and is not thread-safe, and a dashboard's load is a few requests
a second."""
from __future__ import annotations

import threading
import time

from shmq.client.admin import Admin
from shmq.errors import ShmqError

SYSTEM_PREFIXES = ("%RETRY%", "%DLQ%", "RMQ_SYS_", "SCHEDULE_TOPIC", "TBW102", "BenchmarkTest", "OFFSET_MOVED_EVENT",
                   "SELF_TEST_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC")
#: how long a create waits for the NameServer to route the new topic
ROUTE_WAIT_S = 10.0


def is_system(topic: str, names: set[str] = frozenset()) -> bool:
    """RocketMQ's system topics, and the topics a broker makes of its own and its cluster's name."""
    return topic.startswith(SYSTEM_PREFIXES) or topic.endswith("_REPLY_TOPIC") or topic in names


def message_json(m) -> dict:
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "brokerName": m.broker_name,
            "queueId": m.queue_id, "queueOffset": m.queue_offset, "tags": m.tags, "keys": list(m.keys),
            "reconsumeTimes": m.reconsume_times, "bornTimestamp": m.born_timestamp,
            "storeTimestamp": m.store_timestamp, "properties": dict(m.properties),
            "body": m.body.decode("utf-8", "replace")}


class DashboardApi:
    def __init__(self, namesrv: str, timeout: float = 5.0, access_key: str | None = None,
                 secret_key: str | None = None):
        self.namesrv = namesrv
        self.acl = {"access_key": access_key, "secret_key": secret_key}
        self.admin = Admin(namesrv, timeout, **self.acl)
        self.lock = threading.RLock()
        self._groups: set[str] = set()  # groups seen (looked up or found through their topics)

    def close(self) -> None:
        with self.lock:
            self.admin.close()

    # ---- cluster --------------------------------------------------------------------------
    def cluster(self) -> dict:
        with self.lock:
            info = self.admin.cluster_info()
            brokers = []
            for cluster, names in sorted(info.clusterAddrTable.items()):
                for name in sorted(names):
                    bd = info.brokerAddrTable.get(name)
                    for bid, addr in sorted((bd.brokerAddrs if bd else {}).items()):
                        try:
                            rt = self.admin.runtime_info(addr)
                            err = ""
                        except ShmqError as e:
                            rt, err = {}, str(e)
                        brokers.append({"cluster": cluster, "brokerName": name, "brokerId": bid, "addr": addr,
                                        "role": "MASTER" if bid == 0 else "SLAVE",
                                        "version": rt.get("brokerVersionDesc", ""), "diskRatio": rt.get("commitLogDiskRatio", ""),
                                        "commitLogMaxOffset": rt.get("commitLogMaxOffset", ""),
                                        "workers": rt.get("shmqWorkers", ""), "runtime": rt, "error": err})
        return {"namesrv": self.namesrv, "brokers": brokers}

    # ---- topics ---------------------------------------------------------------------------
    def topics(self) -> list[dict]:
        with self.lock:
            info = self.admin.cluster_info()
            names = set(info.clusterAddrTable) | set(info.brokerAddrTable)
            out = []
            for t in self.admin.topic_list():
                if t.startswith("%RETRY%"):
                    self._groups.add(t[len("%RETRY%"):])
                out.append({"topic": t, "system": is_system(t, names)})
        return out

    def topic(self, topic: str) -> dict:
        with self.lock:
            route = self.admin.route(topic)
            status = self.admin.topic_status(topic)
            try:
                groups = self.admin.consumed_by(topic)
                self._groups.update(groups)
            except ShmqError:
                groups = None  # the broker does not serve QUERY_TOPIC_CONSUME_BY_WHO yet
        return {"topic": topic,
                "brokers": [{"brokerName": b.brokerName, "addrs": {str(k): v for k, v in b.brokerAddrs.items()}}
                            for b in route.brokerDatas],
                "queues": [{"brokerName": q.brokerName, "read": q.readQueueNums, "write": q.writeQueueNums,
                            "perm": q.perm} for q in route.queueDatas],
                "status": [{"brokerName": s.broker_name, "queueId": s.queue_id, "minOffset": s.min_offset,
                            "maxOffset": s.max_offset, "lastUpdate": s.last_update_ms} for s in status],
                "total": sum(s.max_offset for s in status), "groups": groups}

    def create_topic(self, topic: str, queues: int) -> dict:
        """Create ``topic`` on every master, then wait (at most ROUTE_WAIT_S) until the
        NameServer routes it: a broker registers a new topic after answering the create (as
        RocketMQ's does), and the page the browser opens next asks the NameServer for the route.
        ``routed`` says whether it came in time."""
        with self.lock:
            brokers = self.admin.create_topic(topic, queues)
        deadline = time.monotonic() + ROUTE_WAIT_S
        while True:
            try:
                with self.lock:
                    self.admin.route(topic)
                return {"topic": topic, "brokers": brokers, "routed": True}
            except ShmqError:
                if time.monotonic() >= deadline:
                    return {"topic": topic, "brokers": brokers, "routed": False}
                time.sleep(0.05)

    def delete_topic(self, topic: str) -> dict:
        with self.lock:
            self.admin.delete_topic(topic)
        return {"topic": topic, "deleted": True}

    def topic_totals(self, topics: list[str]) -> dict[str, int]:
        """topic -> messages stored (sum of max offsets): the sampler's input for rates."""
        out = {}
        with self.lock:
            for t in topics:
                try:
                    out[t] = sum(s.max_offset for s in self.admin.topic_status(t))
                except ShmqError:
                    continue
        return out

    # ---- groups ---------------------------------------------------------------------------
    def groups(self) -> list[str]:
        self.topics()
        return sorted(self._groups)

    def group(self, group: str) -> dict:
        with self.lock:
            self._groups.add(group)
            # Without GET_CONSUME_STATS the admin client asks every topic, and a broker answers 0
            # (not "none") for a queue the group never committed on: keep the group's own topics.
            rows = [r for r in self.admin.consume_stats(group)
                    if (r.topic == f"%RETRY%{group}" or not is_system(r.topic))
                    and (r.broker_offset > 0 or r.consumer_offset > 0)]
            try:
                gc = self.admin.consumer_connections(group)
                members = [{"clientId": c.client_id, "clientAddr": c.client_addr, "language": c.language,
                            "version": c.version} for c in gc.connections]
                subs, members_error = gc.subscriptions, ""
            except ShmqError as e:
                members, subs, members_error = [], {}, str(e)
        return {"group": group, "members": members, "subscriptions": subs, "membersError": members_error,
                "queues": [{"topic": r.topic, "brokerName": r.broker_name, "queueId": r.queue_id,
                            "brokerOffset": r.broker_offset, "consumerOffset": r.consumer_offset, "lag": r.lag}
                           for r in sorted(rows, key=lambda r: (r.topic, r.broker_name, r.queue_id))],
                "lag": sum(r.lag for r in rows)}

    def group_lag(self, group: str) -> int:
        with self.lock:
            return sum(r.lag for r in self.admin.consume_stats(group))

    def reset(self, group: str, topic: str, timestamp_ms: int) -> dict:
        with self.lock:
            table = self.admin.reset_offset(group, topic, timestamp_ms)
        return {"group": group, "topic": topic,
                "offsets": [{"brokerName": b, "queueId": q, "offset": o} for (b, q), o in sorted(table.items())]}

    # ---- messages -------------------------------------------------------------------------
    def by_key(self, topic: str, key: str) -> list[dict]:
        with self.lock:
            return [message_json(m) for m in self.admin.query_by_key(topic, key, 64)]

    def by_id(self, msg_id: str, topic: str | None) -> list[dict]:
        with self.lock:
            return [message_json(self.admin.view(msg_id, topic))]

    def by_time(self, topic: str, begin_ms: int, end_ms: int, limit: int = 200) -> list[dict]:
        out = []
        with self.lock:
            for broker, addr, q in self.admin.queues(topic):
                start = self.admin.offset_by_time(addr, topic, q, begin_ms)
                for m in self.admin.read_range(topic, addr, q, start):
                    if m.store_timestamp >= end_ms or len(out) >= limit:
                        break
                    m.broker_name = broker
                    out.append(message_json(m))
        return sorted(out, key=lambda m: m["storeTimestamp"])

    def dlq_resend(self, group: str, msg_id: str | None) -> dict:
        from shmq.client.producer import Producer
        with self.lock, Producer("TOOLS_DLQ_RESEND", self.namesrv, local="never", **self.acl) as p:
            n = self.admin.dlq_resend(group, p, msg_id or None)
        return {"group": group, "resent": n}


def now_ms() -> int:
    return int(time.time() * 1000)

