"""The NameServer process: a remoting server, the route table, and the liveness scan.

A broker is alive while it keeps registering (every 30 s) or answering QUERY_DATA_VERSION
with an unchanged version. The scan runs every ``scanNotActiveBrokerInterval`` and drops a
broker silent for more than ``brokerChannelExpiredTime``, closing its connection. A broker
whose registering connection closes is dropped at once. Several NameServers run side by
side without talking to each other; brokers register with each.
"""
from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Callable

from shmq.protocol import RemotingServer
from shmq.protocol.transport import Connection
from shmq.service import AsyncService

from shmq.namesrv.config import NamesrvConfig
from shmq.namesrv.processors import NamesrvProcessor

log = logging.getLogger("shmq.namesrv")


class NameServer:
    """``await NameServer(config).start()``; ``.address`` then holds the real ``host:port``."""

    def __init__(self, config: NamesrvConfig | None = None, *, clock: Callable[[], float] = time.monotonic):
        self.config = config or NamesrvConfig()
        self.clock = clock
        self.processor = NamesrvProcessor(self.config, clock=clock)
        self.table = self.processor.table
        handlers = self.processor.handlers()
        self.metrics = None
        if str(self.config.metricsExporterType).upper() == "PROM":
            from shmq.namesrv.metrics import NamesrvMetrics
            self.metrics = NamesrvMetrics(self.config, self.table)
            handlers = self.metrics.rpc.wrap(handlers)
        self.server = RemotingServer(
            handlers,
            self.config.bindAddress,
            self.config.listenPort,
            max_frame_size=self.config.maxFrameSize,
            idle_timeout=float(self.config.serverChannelMaxIdleTimeSeconds) or None,
            frame_timeout=self.config.partialFrameTimeoutMillis / 1000.0,
            max_connections=self.config.serverMaxConnections,
            max_connections_per_peer=self.config.serverMaxConnectionsPerPeer or None,
            on_close=self._connection_closed,
            default_handler=_silent,
            name="namesrv",
        )
        self._scan = AsyncService("shmq-namesrv-scan", self.config.scanNotActiveBrokerInterval / 1000.0,
                                  self.scan_not_active_brokers, log=log)
        self._started = False
        self._stopped = asyncio.Event()

    @property
    def address(self) -> str:
        return self.server.address

    @property
    def port(self) -> int:
        return self.server.port

    async def start(self) -> None:
        await self.server.start()
        if self.metrics is not None:
            self.metrics.start(self.address)
        self._started = True
        self._scan.start()
        log.info(
            "NameServer on %s: brokers expire after %d ms of silence, scanned every %d ms",
            self.address, self.config.brokerChannelExpiredTime, self.config.scanNotActiveBrokerInterval,
        )

    async def serve_forever(self) -> None:
        if not self._started:
            await self.start()
        await self._stopped.wait()

    async def close(self) -> None:
        self._stopped.set()
        await self._scan.stop()
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.stop)
        await self.server.close()

    async def __aenter__(self) -> "NameServer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- liveness ----------------------------------------------------------------------------
    def scan_not_active_brokers(self) -> int:
        """Drop brokers silent too long; returns how many. Run every scanNotActiveBrokerInterval."""
        expire_ms = self.config.brokerChannelExpiredTime
        now = self.clock()
        dropped = 0
        for addr, live in self.table.expired(now, expire_ms / 1000.0):
            silent_ms = (now - live.last_update) * 1000.0
            self.table.remove_broker_addr(
                addr, f"expired: silent for {silent_ms:.0f} ms > brokerChannelExpiredTime {expire_ms} ms"
            )
            conn = live.conn
            if isinstance(conn, Connection):
                conn.close()
            dropped += 1
        return dropped

    def _connection_closed(self, conn: Connection) -> None:
        addr = self.table.broker_of_connection(conn)
        if addr is not None:
            self.table.remove_broker_addr(addr, f"its connection {conn.local}<-{conn.peer} closed")


def run(config: NamesrvConfig, *, on_ready: Callable[[NameServer], None] | None = None) -> int:
    """Run a NameServer until SIGINT or SIGTERM; returns the process exit code.

    ``on_ready`` is called once the port is bound (the CLI prints its readiness line there)."""
    from shmq.protocol import loop as loops

    async def serve() -> int:
        ns = NameServer(config)
        try:
            await ns.start()
        except OSError as e:
            log.error("cannot listen on %s:%s: %s", config.bindAddress, config.listenPort, e)
            return 1
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if on_ready is not None:
            on_ready(ns)
        await stop.wait()
        log.info("shutting down")
        await ns.close()
        return 0

    try:
        return loops.run(serve())
    except KeyboardInterrupt:
        return 0


def _silent(conn, cmd):
    """A request code the NameServer does not know gets no answer: RocketMQ's
    DefaultRequestProcessor returns null for it, so the caller waits for its own timeout."""
    log.debug("request code %d from %s: not a NameServer request, not answered", cmd.code, conn.peer)
    return None
