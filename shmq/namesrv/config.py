"""NameServer settings, read from a Java-properties file with RocketMQ's key names.

RocketMQ 4.x hard-codes the broker expiry (120 s) and the scan period (10 s); 5.x made the
scan a setting (``scanNotActiveBrokerInterval``). shmq takes both as settings, in
milliseconds like every RocketMQ duration, so tests can shorten them.
"""
from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, fields

from shmq.protocol import javaprops

log = logging.getLogger("shmq.namesrv")

#: RocketMQ keys that mean something to a Java NameServer and nothing here (thread pools,
#: Netty buffers, paths of features shmq does not have). Accepted silently (logged at debug).
IGNORED_KEYS = frozenset(
    {
        "rocketmqHome", "configStorePath", "productEnvName", "clusterTest",
        "serverWorkerThreads", "serverCallbackExecutorThreads", "serverSelectorThreads",
        "serverOnewaySemaphoreValue", "serverAsyncSemaphoreValue", "serverSocketSndBufSize",
        "serverSocketRcvBufSize", "serverPooledByteBufAllocatorEnable", "useEpollNativeSelector",
        "enableAllTopicList", "enableTopicList", "notifyMinBrokerIdChanged",
        "defaultThreadPoolNums", "clientRequestThreadPoolNums",
    }
)


@dataclass
class NamesrvConfig:
    listenPort: int = 9876
    #: RocketMQ 5's name for the listen address; 127.0.0.1 unless told otherwise (safe by default).
    bindAddress: str = "127.0.0.1"
    #: A broker that has not registered (or queried its data version) this long is dropped.
    brokerChannelExpiredTime: int = 120_000
    #: How often the expiry scan runs.
    scanNotActiveBrokerInterval: int = 10_000
    #: Connections silent this long are closed (RocketMQ: 120 s; brokers re-register every 30 s).
    serverChannelMaxIdleTimeSeconds: int = 120
    #: When set, GET_ROUTEINFO_BY_TOPIC carries orderTopicConf from the ORDER_TOPIC_CONFIG namespace.
    orderMessageEnable: bool = False
    #: Where PUT_KV_CONFIG entries persist (JSON, RocketMQ's kvConfig.json shape); empty = memory only.
    kvConfigPath: str = ""
    #: Largest frame accepted, its length word included.
    maxFrameSize: int = 16 * 1024 * 1024
    #: A connection whose started frame stays incomplete this long is closed (shmq's own key).
    partialFrameTimeoutMillis: int = 30_000
    #: Connections at most, and per remote IP (0 = no per-IP bound); shmq's keys, as the broker's.
    serverMaxConnections: int = 10_000
    serverMaxConnectionsPerPeer: int = 1000
    #: RocketMQ 5's metrics keys: PROM serves Prometheus metrics (shmq/namesrv/metrics.py).
    metricsExporterType: str = "DISABLE"
    metricsPromExporterHost: str = "127.0.0.1"
    #: 0 picks a free port.
    metricsPromExporterPort: int = 5557

    def update(self, props: Mapping[str, str], *, source: str = "config") -> list[str]:
        """Apply ``props`` (strings); returns the unknown keys (each logged as a warning)."""
        unknown = javaprops.apply(self, props, ignored=IGNORED_KEYS, source=source, log=log)
        return unknown

    @classmethod
    def from_file(cls, path: str) -> "NamesrvConfig":
        cfg = cls()
        cfg.update(javaprops.load(path), source=path)
        return cfg

    def as_properties(self) -> dict[str, object]:
        return {f.name: str(getattr(self, f.name)).lower() if f.type in (bool, "bool") else getattr(self, f.name)
                for f in fields(self)}
