"""Broker settings: a Java-properties ``broker.conf`` with RocketMQ's key names, plus shmq's own.

Every field is named after the broker.conf key it reads, so an existing RocketMQ file works.
Durations are milliseconds, as in RocketMQ. shmq's own keys (``workers``, ``listenAddress``
and the short intervals tests use) follow the same style. A key shmq does not know is a
warning, never a failure; RocketMQ keys that mean nothing here (thread pools, Netty buffers)
are accepted silently.

The whole config travels to worker processes as JSON (:meth:`BrokerConfig.to_json`), so
a worker sees exactly what the supervisor resolved (ports picked, paths made absolute).
"""
from __future__ import annotations

import ipaddress
import json
import logging
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass

from shmq.protocol import javaprops
from shmq.store import StoreConfig
from shmq.store.config import FLUSH_MODES, ROLES
from shmq.store.delay_levels import DelayLevels
from shmq.store.put import PutPipeline
from shmq.store.timer_rules import TimerSettings

log = logging.getLogger("shmq.broker")

DEFAULT_DELAY_LEVELS = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

#: RocketMQ keys with no effect in shmq; accepted without a warning.
IGNORED_KEYS = frozenset({
    "rocketmqHome", "namesrvAddrs", "brokerIP2",
    "sendMessageThreadPoolNums", "pullMessageThreadPoolNums", "queryMessageThreadPoolNums",
    "adminBrokerThreadPoolNums", "clientManageThreadPoolNums", "consumerManageThreadPoolNums",
    "heartbeatThreadPoolNums", "endTransactionThreadPoolNums", "serverWorkerThreads",
    "serverCallbackExecutorThreads", "serverSelectorThreads", "serverSocketSndBufSize",
    "serverSocketRcvBufSize", "serverPooledByteBufAllocatorEnable", "useEpollNativeSelector",
    "transientStorePoolEnable", "warmMapedFileEnable", "useReentrantLockWhenPutMessage",
    "sendThreadPoolQueueCapacity", "pullThreadPoolQueueCapacity", "osPageCacheBusyTimeOutMills",
    "waitTimeMillsInSendQueue", "storePathCommitLog",
    "storePathConsumeQueue", "storePathIndex", "storeCheckpoint", "abortFile",
    "longPollingEnable", "transferMsgByHeap", "traceTopicEnable",
    "msgTraceTopicName", "enableDLegerCommitLog", "isEnableBatchPush", "compressedRegister",
    "forceRegister", "clusterTopicEnable", "brokerTopicEnable", "autoCreateSubscriptionGroup",
    "duplicationEnable", "fetchNamesrvAddrByAddressServer", "offsetCheckInSlave",
})


@dataclass
class BrokerConfig:
    # ---- identity and network (RocketMQ keys) ----
    brokerClusterName: str = "DefaultCluster"
    brokerName: str = "broker-a"
    brokerId: int = 0
    #: The address clients are told (registered with the NameServers, stored as storeHost).
    brokerIP1: str = "127.0.0.1"
    #: 0 picks a free port (tests); the VIP channel is listenPort - 2.
    listenPort: int = 10911
    namesrvAddr: str = ""
    brokerRole: str = "ASYNC_MASTER"
    brokerPermission: int = 6
    # ---- store (RocketMQ keys, mapped onto StoreConfig) ----
    storePathRootDir: str = os.path.join(os.path.expanduser("~"), "store")
    mappedFileSizeCommitLog: int = 1 << 30
    #: bytes per ConsumeQueue file (20 per entry); a store keeps the size it was created with
    mappedFileSizeConsumeQueue: int = 300_000 * 20
    flushDiskType: str = "ASYNC_FLUSH"
    flushIntervalCommitLog: int = 500
    flushIntervalConsumeQueue: int = 1000
    syncFlushTimeout: int = 5000
    deleteWhen: str = "04"
    fileReservedTime: float = 72
    diskMaxUsedSpaceRatio: float = 75
    maxMessageSize: int = 4 * 1024 * 1024
    messageIndexEnable: bool = True
    maxHashSlotNum: int = 5_000_000
    maxIndexNum: int = 20_000_000
    # ---- replication (RocketMQ keys and defaults; store/ha) ----
    #: The master's HA port; 0 = listenPort + 1 (RocketMQ always uses listenPort + 1).
    haListenPort: int = 0
    #: A slave's master HA address host:port; empty = learned from the NameServers' answer.
    haMasterAddress: str = ""
    haSendHeartbeatInterval: int = 5000
    haHousekeepingInterval: int = 20_000
    #: SYNC_MASTER answers SLAVE_NOT_AVAILABLE when the best slave lags this many bytes.
    haSlaveFallbehindMax: int = 256 * 1024 * 1024
    #: Consumers may be told to read from a slave (pull's suggestWhichBrokerId).
    slaveReadEnable: bool = False
    #: Percent of memory the master's unread backlog may reach before it suggests a slave.
    accessMessageInMemoryMaxRatio: int = 40
    #: How often a slave copies topics, offsets and delay progress from its master (10 s).
    slaveSynchronizeInterval: int = 10_000
    # ---- topics and messages (RocketMQ keys) ----
    messageDelayLevel: str = DEFAULT_DELAY_LEVELS
    autoCreateTopicEnable: bool = True
    #: Queues of TBW102 and so the most a topic auto-created through it gets. RocketMQ's
    #: broker default is 8; issue 4 asks for 4 read / 4 write, which is also what clients ask
    #: for (their defaultTopicQueueNums is 4), so topics come out the same either way.
    defaultTopicQueueNums: int = 4
    enablePropertyFilter: bool = False
    maxReconsumeTimes: int = 16
    #: RocketMQ 5's timer wheel keys (TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS). shmq
    #: fires at the millisecond by default (RocketMQ: 1000) and never before the asked time.
    timerWheelEnable: bool = True
    timerMaxDelaySec: int = 3 * 24 * 3600
    timerPrecisionMs: int = 1
    #: POP (RocketMQ 5): the request mode QUERY_ASSIGNMENT answers for a group no
    #: SET_MESSAGE_REQUEST_MODE named, and how many consumers share a queue in POP mode.
    defaultMessageRequestMode: str = "PULL"
    defaultPopShareQueueNum: int = -1
    notifyConsumerIdsChangedEnable: bool = True
    #: Transactions (RocketMQ's keys): how often half messages are checked, how old one must
    #: be before it is checked, and how many checks before it is discarded.
    transactionCheckInterval: int = 60_000
    transactionTimeOut: int = 6000
    transactionCheckMax: int = 15
    #: Milliseconds a pull with nothing to return may be held, at most (the request asks).
    longPollingMaxMillis: int = 30_000
    # ---- intervals (RocketMQ: hard-coded or fixed keys; settings here so tests shorten them) ----
    registerNameServerPeriod: int = 30_000
    #: Producers and consumers silent this long are dropped (RocketMQ: 120 s).
    channelExpiredTimeout: int = 120_000
    #: How often the client scan runs (RocketMQ: 10 s).
    clientScanInterval: int = 10_000
    #: How often consumerOffset.json is written (RocketMQ: flushConsumerOffsetInterval 5 s).
    flushConsumerOffsetInterval: int = 5000
    #: A queue lock for orderly consumption lives this long without renewal (RocketMQ: 60 s).
    rebalanceLockMaxLiveTime: int = 60_000
    # ---- metrics (RocketMQ 5's keys) ----
    #: PROM serves Prometheus metrics from the supervisor; DISABLE (default) serves none.
    metricsExporterType: str = "DISABLE"
    metricsPromExporterHost: str = "127.0.0.1"
    #: 0 picks a free port.
    metricsPromExporterPort: int = 5557
    #: shmq's own: how often workers push their counts to the supervisor (and the queue tail runs).
    metricsPushIntervalMillis: int = 1000
    # ---- shmq's own ----
    #: Worker processes serving TCP (0 = min(cpu_count, 4)).
    workers: int = 0
    #: Address the workers bind (loopback unless told otherwise: safe by default).
    listenAddress: str = "127.0.0.1"
    #: Largest frame accepted (16 MiB, as Java).
    maxFrameSize: int = 16 * 1024 * 1024
    #: Close a connection silent this long (RocketMQ: serverChannelMaxIdleTimeSeconds 120).
    serverChannelMaxIdleTimeSeconds: int = 120
    #: Connection hygiene (shmq's keys; RocketMQ has no equivalents, Netty's defaults are
    #: unbounded): a started frame must complete within this time (slowloris) ...
    partialFrameTimeoutMillis: int = 30_000
    #: ... at most this many connections per worker, and per remote IP (0 = no per-IP bound;
    #: local clients all come from 127.0.0.1, so the per-IP default is generous) ...
    serverMaxConnections: int = 10_000
    serverMaxConnectionsPerPeer: int = 1000
    #: ... and per connection at most this many requests / request bytes being served
    #: before reading from it pauses.
    serverMaxInflightRequests: int = 1024
    serverMaxInflightBytes: int = 64 * 1024 * 1024
    # ---- security (RocketMQ keys aclEnable; shmq's aclFile and the override) ----
    #: Check every request against plain_acl.yml (RocketMQ 4.x PlainAccessValidator rules).
    aclEnable: bool = False
    #: The ACL file; empty: $ROCKETMQ_HOME/conf/plain_acl.yml, as RocketMQ reads it.
    aclFile: str = ""
    #: A listen address other than loopback needs aclEnable=true, or this set to true.
    allowUnauthenticatedListen: bool = False
    #: Group (name or gid) given rw on store files and shared memory (0660); empty: 0600.
    storeGroup: str = ""
    #: At start, remove shared-memory segments of deleted stores whose owner is dead.
    segmentGcOnStart: bool = True
    #: A worker that dies is restarted after this delay (doubling while it keeps dying).
    workerRestartDelayMillis: int = 200
    #: At SIGTERM, workers wait this long for in-flight requests before closing connections.
    shutdownGraceMillis: int = 3000
    #: Where the supervisor<->worker control socket lives (default: <store>/broker.sock).
    controlSocket: str = ""

    # ------------------------------------------------------------------ loading ----
    def update(self, props: Mapping[str, str], *, source: str = "config") -> list[str]:
        """Apply ``props`` (strings); returns the unknown keys (each logged as a warning)."""
        unknown = javaprops.apply(self, props, ignored=IGNORED_KEYS, source=source, log=log)
        self.check()
        return unknown

    def check(self) -> None:
        if self.flushDiskType not in FLUSH_MODES:
            raise ValueError(f"flushDiskType must be one of {sorted(FLUSH_MODES)}, got {self.flushDiskType!r}")
        if self.brokerRole not in ROLES:
            raise ValueError(f"brokerRole must be one of {sorted(ROLES)}, got {self.brokerRole!r}")
        if self.brokerRole == "SLAVE" and self.brokerId <= 0:
            raise ValueError("a SLAVE's brokerId must be > 0 (0 is the master's)")
        if self.brokerRole != "SLAVE":
            self.brokerId = 0  # RocketMQ: a master's brokerId is always MASTER_ID
        DelayLevels.parse(self.messageDelayLevel)  # a bad level refuses to start, naming it
        if str(self.metricsExporterType).upper() not in ("DISABLE", "PROM"):
            raise ValueError(f"metricsExporterType must be DISABLE or PROM (shmq has no OTLP exporter), "
                             f"got {self.metricsExporterType!r}")
        if self.workers < 0:
            raise ValueError("workers must be >= 0")
        if self.listenPort != 0 and not (2 < self.listenPort < 65536):
            raise ValueError(f"listenPort {self.listenPort} out of range (the VIP port is listenPort - 2)")
        if not is_loopback(self.listenAddress) and not self.aclEnable and not self.allowUnauthenticatedListen:
            raise ValueError(
                f"listenAddress={self.listenAddress} is reachable from other hosts, and every request would be "
                f"served unauthenticated: set aclEnable=true (with a plain_acl.yml), or "
                f"allowUnauthenticatedListen=true to accept that")

    @classmethod
    def from_file(cls, path: str) -> "BrokerConfig":
        cfg = cls()
        cfg.update(javaprops.load(path), source=path)
        return cfg

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "BrokerConfig":
        return cls(**json.loads(text))

    # ------------------------------------------------------------------ derived ----
    @property
    def worker_count(self) -> int:
        return self.workers or min(os.cpu_count() or 1, 4)

    @property
    def vip_port(self) -> int:
        return self.listenPort - 2

    @property
    def broker_addr(self) -> str:
        return f"{self.brokerIP1}:{self.listenPort}"

    @property
    def is_slave(self) -> bool:
        return self.brokerRole == "SLAVE"

    @property
    def ha_port(self) -> int:
        return self.haListenPort or self.listenPort + 1

    @property
    def namesrv_list(self) -> list[str]:
        return [a.strip() for a in self.namesrvAddr.split(";") if a.strip()]

    @property
    def store_root(self) -> str:
        return os.path.abspath(os.path.expanduser(self.storePathRootDir))

    @property
    def control_path(self) -> str:
        return self.controlSocket or os.path.join(self.store_root, "broker.sock")

    @property
    def delay_levels_ms(self) -> list[int]:
        return parse_delay_levels(self.messageDelayLevel)

    def put_pipeline(self, store, on_new_topic) -> PutPipeline:
        """The put pipeline with this broker's cluster name, delay levels and retry limit: the
        supervisor (schedule service) and every worker build the same one, so a message is
        stored alike whoever puts it."""
        return PutPipeline(store, self.brokerClusterName, DelayLevels.parse(self.messageDelayLevel),
                           default_max_reconsume_times=self.maxReconsumeTimes, on_new_topic=on_new_topic,
                           timer=self.timer_settings)

    @property
    def timer_settings(self) -> TimerSettings:
        return TimerSettings(self.timerWheelEnable, self.timerMaxDelaySec, self.timerPrecisionMs)

    def store_config(self) -> StoreConfig:
        return StoreConfig(
            root=self.store_root,
            mapped_file_size_commitlog=self.mappedFileSizeCommitLog,
            cq_entries_per_file=max(1, self.mappedFileSizeConsumeQueue // 20),
            max_message_size=self.maxMessageSize,
            flush_disk_type=FLUSH_MODES[self.flushDiskType],
            flush_interval_commitlog_ms=self.flushIntervalCommitLog,
            flush_interval_consume_queue_ms=self.flushIntervalConsumeQueue,
            sync_flush_timeout_ms=self.syncFlushTimeout,
            file_reserved_time_hours=self.fileReservedTime,
            delete_when=self.deleteWhen,
            disk_max_used_space_ratio=self.diskMaxUsedSpaceRatio,
            message_index_enable=self.messageIndexEnable,
            max_hash_slot_num=self.maxHashSlotNum,
            max_index_num=self.maxIndexNum,
            store_host=(self.brokerIP1, self.listenPort),
            group=self.storeGroup or None,
            broker_role=ROLES[self.brokerRole],
            ha_slave_fallbehind_max=self.haSlaveFallbehindMax,
        )


def server_limits(cfg: BrokerConfig) -> dict:
    """The connection-hygiene keywords of :class:`~shmq.protocol.server.RemotingServer`."""
    return {
        "max_frame_size": cfg.maxFrameSize,
        "idle_timeout": float(cfg.serverChannelMaxIdleTimeSeconds) or None,
        "frame_timeout": cfg.partialFrameTimeoutMillis / 1000.0,
        "max_connections": cfg.serverMaxConnections,
        "max_connections_per_peer": cfg.serverMaxConnectionsPerPeer or None,
        "max_inflight": cfg.serverMaxInflightRequests,
        "max_inflight_bytes": cfg.serverMaxInflightBytes,
    }


def is_loopback(host: str) -> bool:
    """``host`` (an address or ``localhost``) reaches only this machine."""
    if host == "localhost":
        return True
    try:
        addr = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False  # a name: it may resolve to anything
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


_UNITS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def parse_delay_levels(text: str) -> list[int]:
    """``"1s 5s 1m"`` -> ``[1000, 5000, 60000]`` (RocketMQ's parseDelayLevel; ``ms`` accepted too)."""
    out: list[int] = []
    for word in text.split():
        if word.endswith("ms"):
            out.append(int(word[:-2]))
        elif word[-1:] in _UNITS:
            out.append(int(word[:-1]) * _UNITS[word[-1]])
        else:
            raise ValueError(f"messageDelayLevel: bad level {word!r} (expected a number and s, m, h or d)")
    return out
