"""The NameServer's tables as plain data: who is alive, which broker serves which topic.

Semantics follow RocketMQ 4.9.8's ``RouteInfoManager``:

* ``register_broker`` adds the broker to its cluster and broker name, replaces an entry of
  the same address under another id (a slave promoted to master), and, for a master
  (id 0) whose DataVersion changed or that is new, applies its topic configs as QueueData.
  Topics a broker stops mentioning are *not* removed (RocketMQ does not either; they go when
  the broker goes, or with DELETE_TOPIC_IN_NAMESRV).
* ``remove_broker_addr`` is what an expiry or a closed broker connection does: drop the
  address; when a broker name has no address left, drop the name from its cluster and its
  QueueData from every topic, and topics with no QueueData left.
* A route needs at least one QueueData and the BrokerData of one of its brokers.

Nothing here does I/O or reads a clock: times come in as ``now`` (seconds, any monotonic
origin), connections as opaque handles compared by identity. Every method is synchronous
and the server runs on one event loop, so no locks are needed.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from shmq.protocol.bodies import (
    BrokerData,
    ClusterInfo,
    DataVersion,
    QueueData,
    TopicConfigSerializeWrapper,
    TopicRouteData,
)
from shmq.protocol.codes import MASTER_ID, Perm

log = logging.getLogger("shmq.namesrv")

#: TopicSysFlag bits (``common/sysflag/TopicSysFlag.java``).
FLAG_UNIT = 0x1
FLAG_UNIT_SUB = 0x2


@dataclass
class BrokerLive:
    last_update: float
    data_version: DataVersion
    conn: Any
    ha_server_addr: str
    cluster: str = ""
    broker_name: str = ""
    broker_id: int = 0


@dataclass
class RegisterResult:
    ha_server_addr: str | None = None
    master_addr: str | None = None


@dataclass
class RouteTable:
    topic_queue: dict[str, dict[str, QueueData]] = field(default_factory=dict)
    broker_addr: dict[str, BrokerData] = field(default_factory=dict)
    cluster_addr: dict[str, set[str]] = field(default_factory=dict)
    broker_live: dict[str, BrokerLive] = field(default_factory=dict)
    filter_server: dict[str, list[str]] = field(default_factory=dict)
    #: Bumped by every change a route answer could reflect; lets callers cache encoded routes.
    generation: int = 0

    # ---- registration ------------------------------------------------------------------------
    def register_broker(
        self,
        cluster: str,
        addr: str,
        name: str,
        broker_id: int,
        ha_server_addr: str,
        wrapper: TopicConfigSerializeWrapper | None,
        filter_servers: list[str] | None,
        conn: Any,
        now: float,
    ) -> RegisterResult:
        self.generation += 1
        self.cluster_addr.setdefault(cluster, set()).add(name)
        bd = self.broker_addr.get(name)
        first = bd is None
        if bd is None:
            bd = self.broker_addr[name] = BrokerData(cluster=cluster, brokerName=name, brokerAddrs={})
        # The same ip:port holds one id only: a slave promoted to master re-registers as 0.
        for bid in [b for b, a in bd.brokerAddrs.items() if a == addr and b != broker_id]:
            del bd.brokerAddrs[bid]
        old_addr = bd.brokerAddrs.get(broker_id)
        bd.brokerAddrs[broker_id] = addr
        if broker_id == MASTER_ID and old_addr != addr:
            log.info("cluster %s broker %s master address %s -> %s", bd.cluster, name, old_addr, addr)
        first = first or old_addr is None

        version = wrapper.dataVersion if wrapper is not None else DataVersion()
        if wrapper is not None and broker_id == MASTER_ID and (first or self.is_changed(addr, version)):
            for tc in wrapper.topicConfigTable.values():
                qd = QueueData(
                    brokerName=name,
                    readQueueNums=tc.readQueueNums,
                    writeQueueNums=tc.writeQueueNums,
                    perm=tc.perm,
                    topicSysFlag=tc.topicSysFlag,
                )
                by_broker = self.topic_queue.setdefault(tc.topicName, {})
                old = by_broker.get(name)
                by_broker[name] = qd
                if old is None:
                    log.info("topic %s registered on broker %s: %s", tc.topicName, name, qd)
                elif old != qd:
                    log.info("topic %s changed on broker %s: %s -> %s", tc.topicName, name, old, qd)

        prev = self.broker_live.get(addr)
        self.broker_live[addr] = BrokerLive(now, version, conn, ha_server_addr, cluster, name, broker_id)
        if prev is None:
            log.info(
                "broker registered: %s (cluster %s, name %s, id %d, HA %s, %d topics)",
                addr, cluster, name, broker_id, ha_server_addr or "-",
                len(wrapper.topicConfigTable) if wrapper else 0,
            )
        if filter_servers is not None:
            if filter_servers:
                self.filter_server[addr] = list(filter_servers)
            else:
                self.filter_server.pop(addr, None)

        result = RegisterResult()
        if broker_id != MASTER_ID:
            master = bd.brokerAddrs.get(MASTER_ID)
            live = self.broker_live.get(master) if master else None
            if live is not None:
                result.ha_server_addr, result.master_addr = live.ha_server_addr, master
        return result

    def unregister_broker(self, cluster: str, addr: str, name: str, broker_id: int) -> None:
        self.generation += 1
        live = self.broker_live.pop(addr, None)
        self.filter_server.pop(addr, None)
        log.info("broker unregistered: %s (cluster %s, name %s, id %d)%s",
                 addr, cluster, name, broker_id, "" if live else " - was not live")
        bd = self.broker_addr.get(name)
        if bd is None:
            return
        bd.brokerAddrs.pop(broker_id, None)
        if bd.brokerAddrs:
            return
        del self.broker_addr[name]
        names = self.cluster_addr.get(cluster)
        if names is not None:
            names.discard(name)
            if not names:
                del self.cluster_addr[cluster]
        self._remove_topics_of(name)

    def remove_broker_addr(self, addr: str, why: str) -> bool:
        """Forget ``addr`` entirely (expired, or its connection closed). False if unknown."""
        self.generation += 1
        live = self.broker_live.pop(addr, None)
        self.filter_server.pop(addr, None)
        found_name = None
        for name, bd in list(self.broker_addr.items()):
            for bid, a in list(bd.brokerAddrs.items()):
                if a == addr:
                    del bd.brokerAddrs[bid]
                    found_name = name
                    break
            if found_name is not None:
                break
        if live is None and found_name is None:
            return False
        log.warning("broker %s removed (%s)", addr, why)
        if found_name is not None and not self.broker_addr[found_name].brokerAddrs:
            del self.broker_addr[found_name]
            for cluster, names in list(self.cluster_addr.items()):
                if found_name in names:
                    names.discard(found_name)
                    if not names:
                        del self.cluster_addr[cluster]
                    break
            log.info("broker name %s has no address left: its topics are withdrawn", found_name)
            self._remove_topics_of(found_name)
        return True

    def _remove_topics_of(self, name: str) -> None:
        for topic in list(self.topic_queue):
            by_broker = self.topic_queue[topic]
            if by_broker.pop(name, None) is not None and not by_broker:
                del self.topic_queue[topic]
                log.info("topic %s has no broker left: removed", topic)

    # ---- liveness --------------------------------------------------------------------------
    def is_changed(self, addr: str, version: DataVersion) -> bool:
        live = self.broker_live.get(addr)
        return live is None or live.data_version != version

    def data_version(self, addr: str) -> DataVersion | None:
        live = self.broker_live.get(addr)
        return live.data_version if live is not None else None

    def touch(self, addr: str, now: float) -> None:
        live = self.broker_live.get(addr)
        if live is not None:
            live.last_update = now

    def expired(self, now: float, expire_after: float) -> list[tuple[str, BrokerLive]]:
        """Brokers silent for more than ``expire_after`` seconds (not removed yet)."""
        return [(a, live) for a, live in self.broker_live.items() if now - live.last_update > expire_after]

    def broker_of_connection(self, conn: Any) -> str | None:
        for addr, live in self.broker_live.items():
            if live.conn is conn:
                return addr
        return None

    # ---- queries -----------------------------------------------------------------------------
    def pickup_route(self, topic: str) -> TopicRouteData | None:
        by_broker = self.topic_queue.get(topic)
        if not by_broker:
            return None
        brokers: list[BrokerData] = []
        filters: dict[str, list[str]] = {}
        for name in sorted(by_broker):
            bd = self.broker_addr.get(name)
            if bd is None:
                continue
            clone = BrokerData(cluster=bd.cluster, brokerName=bd.brokerName, brokerAddrs=dict(bd.brokerAddrs))
            brokers.append(clone)
            if self.filter_server:
                for a in clone.brokerAddrs.values():
                    if a in self.filter_server:
                        filters[a] = list(self.filter_server[a])
        if not brokers:
            return None
        queues = [_copy_qd(by_broker[n]) for n in sorted(by_broker)]
        return TopicRouteData(queueDatas=queues, brokerDatas=brokers, filterServerTable=filters)

    def cluster_info(self) -> ClusterInfo:
        return ClusterInfo(
            brokerAddrTable={
                n: BrokerData(cluster=bd.cluster, brokerName=n, brokerAddrs=dict(bd.brokerAddrs))
                for n, bd in sorted(self.broker_addr.items())
            },
            clusterAddrTable={c: sorted(names) for c, names in sorted(self.cluster_addr.items())},
        )

    def all_topics(self) -> list[str]:
        return sorted(self.topic_queue)

    def topics_by_cluster(self, cluster: str) -> list[str]:
        names = self.cluster_addr.get(cluster, set())
        return sorted(t for t, by in self.topic_queue.items() if names & by.keys())

    def system_topics(self) -> tuple[list[str], str | None]:
        """Cluster and broker names (RocketMQ lists them as system topics) and one broker address."""
        topics: list[str] = []
        for cluster, names in sorted(self.cluster_addr.items()):
            topics.append(cluster)
            topics.extend(sorted(names))
        addr = None
        for bd in self.broker_addr.values():
            if bd.brokerAddrs:
                addr = next(iter(bd.brokerAddrs.values()))
                break
        return topics, addr

    def topics_with_flag(self, pick) -> list[str]:  # type: ignore[no-untyped-def]
        # RocketMQ looks at one QueueData per topic: the flags are the topic's, not the broker's.
        return sorted(t for t, by in self.topic_queue.items() if by and pick(next(iter(by.values())).topicSysFlag))

    # ---- administration ----------------------------------------------------------------------
    def wipe_write_perm(self, name: str) -> int:
        self.generation += 1
        n = 0
        for by_broker in self.topic_queue.values():
            qd = by_broker.get(name)
            if qd is not None:
                qd.perm &= ~Perm.WRITE
                n += 1
        return n

    def add_write_perm(self, name: str) -> int:
        self.generation += 1
        n = 0
        for by_broker in self.topic_queue.values():
            qd = by_broker.get(name)
            if qd is not None:
                qd.perm = Perm.READ | Perm.WRITE
                n += 1
        return n

    def delete_topic(self, topic: str, cluster: str | None = None) -> None:
        self.generation += 1
        if not cluster:
            self.topic_queue.pop(topic, None)
            return
        by_broker = self.topic_queue.get(topic)
        if by_broker is None:
            return
        for name in self.cluster_addr.get(cluster, ()):
            by_broker.pop(name, None)
        if not by_broker:
            del self.topic_queue[topic]


def _copy_qd(qd: QueueData) -> QueueData:
    return QueueData(
        brokerName=qd.brokerName, readQueueNums=qd.readQueueNums, writeQueueNums=qd.writeQueueNums,
        perm=int(qd.perm), topicSysFlag=qd.topicSysFlag,
    )
