"""A broker worker process: serves RocketMQ remoting on listenPort and listenPort - 2.

Started by the supervisor (``python -m shmq.broker.worker.main``; the resolved config arrives as
JSON in ``SHMQ_BROKER_CONFIG``). It attaches to the store the supervisor owns, binds both
ports with SO_REUSEPORT beside its sibling workers (the kernel spreads connections among
them), and talks to the supervisor over the control channel for everything that must be
one per broker (topic creation, client registry, queue locks).

Client connections are *channels* named ``"<worker id>:<pid>.<seq>"``; the supervisor names
them in NOTIFY_IDS_CHANGED / CLOSE_CHANNEL and this worker finds the connection.

Shutdown (SIGTERM/SIGINT, or the supervisor's end of the control channel closing): stop
accepting, answer held pulls, let in-flight requests finish (``shutdownGraceMillis``),
close connections, detach from the store.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import time

from shmq.errors import RemotingClosed, RemotingTimeout
from shmq.message.names import PERM_RW
from shmq.protocol import (RemotingCommand, RemotingServer, RequestCode, ResponseCode, decode_command,
                           encode_command, loop as loops, request)
from shmq.protocol.bodies import SubscriptionData, TopicConfig, decode_json, encode_json
from shmq.protocol.transport import Connection
from shmq.store import MessageStore

from shmq.broker.shared import control_channel as cc
from shmq.broker.shared.acl import PlainAcl
from shmq.broker.shared.attach import AttachGuard
from shmq.broker.shared.config import BrokerConfig, server_limits
from shmq.broker.shared.control_channel import Ctl
from . import dispatch, handover
from .pull_hold import PullHolds, peer_fds
from shmq.broker.shared.topics import TopicTable

log = logging.getLogger("shmq.broker.worker")

#: How long a subscription learnt from the supervisor (another worker's heartbeat) is trusted.
_SUB_TTL = 5.0


class Worker:
    """The worker process; implements :class:`.context.WorkerContext` for the processors."""

    def __init__(self, cfg: BrokerConfig, wid: int):
        self.cfg = cfg
        self.wid = wid
        self.topics = TopicTable(None)
        self.store: MessageStore | None = None
        self.ctl: Connection | None = None
        self.holds: PullHolds | None = None
        self.pipeline = None
        self.servers: list[RemotingServer] = []
        self.channels: dict[str, Connection] = {}
        self._seq = 0
        self._subs: dict[tuple[str, str], tuple[SubscriptionData, float]] = {}
        self.sub_epoch = 0  # moved at every change of _subs (the C pull path's cached subscriptions)
        self._stop = asyncio.Event()
        self.boot_ms = int(time.time() * 1000)
        self.stats = {"put": 0, "get": 0}
        self._metrics = None  # MetricsPush when metricsExporterType=PROM
        self._send_fast = None  # send_fast.FastSends, when the C send path is on
        self.acl_watch = None  # an AsyncService re-reading plain_acl.yml, when aclEnable
        # None: the kernel's placement alone (one worker)
        self.hand_over = handover.from_env(lambda: self.stats["put"] + self.stats["get"])

    # ================================================================ life ==
    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop.set)
        try:
            self.ctl = await cc.connect(self.cfg.control_path, self._ctl_handlers(), self._ctl_closed)
        except (OSError, asyncio.TimeoutError) as e:
            # the supervisor died between spawning this worker and its start (shmq chaos does
            # that): nothing to serve for; leave with one line, not a traceback
            log.warning("worker %d: no supervisor at %s (%s); exiting", self.wid, self.cfg.control_path, e)
            return 1
        resp = await cc.call(self.ctl, cc.ctl(Ctl.HELLO, worker=self.wid, pid=os.getpid()))
        self.topics.replace(resp.body)
        self.store = MessageStore.attach(self.cfg.store_root)
        self.attach_guard = AttachGuard(self.cfg.store_root)
        self.pipeline = self.cfg.put_pipeline(self.store, self._on_new_topic)
        self.holds = PullHolds(self.store, loop, own_bit=self.wid,
                               peer_fds=peer_fds(os.environ.get("SHMQ_PULL_WAKE_FDS")))
        acl = PlainAcl(self.cfg.aclFile) if self.cfg.aclEnable else None  # the supervisor resolved the path
        if acl is not None:
            self.acl_watch = acl.watcher()
            self.acl_watch.start()
        handlers, fast = dispatch.build(self, acl, pull_fast=os.environ.get("SHMQ_PULL_FAST") != "0")
        if os.environ.get("SHMQ_SEND_FAST") == "0":
            fast = None  # every send through Python: the A/B switch of the send benchmarks
        if self.cfg.metricsExporterType.upper() == "PROM":
            # Counted here, pushed to the supervisor's exporter (broker/supervisor/metrics/__init__.py).
            from .metrics import MetricsPush, WorkerStats
            ws = WorkerStats()
            handlers = ws.rpc.wrap(handlers)
            fast = None  # every request is counted by code: none may bypass the handlers
            self._metrics = MetricsPush(ws, lambda body: self.ctl.send_oneway(cc.ctl(Ctl.METRICS, body)),
                                        lambda: self.stats["put"], self.cfg.metricsPushIntervalMillis / 1000.0)
            self._metrics.start()
        self._send_fast = fast  # (its topics_changed, at each table push)
        if fast is not None:
            # its bound __call__, not the instance: a call through an instance's __call__ slot
            # (slot_tp_call) was ~500 instructions more per read (RESULTS: session 10, syncc)
            fast = fast.__call__
        for port in (self.cfg.listenPort, self.cfg.vip_port):
            srv = RemotingServer(
                handlers, self.cfg.listenAddress, port, reuse_port=True,
                **server_limits(self.cfg),
                on_connect=self._on_connect, on_close=self._on_close, name=f"broker-w{self.wid}", fast=fast,
                hand_over=self.hand_over.offer if self.hand_over is not None else None)
            await srv.start()
            self.servers.append(srv)
        if self.hand_over is not None:
            self.hand_over.start(self.servers)
        await cc.call(self.ctl, cc.ctl(Ctl.READY, port=self.servers[0].port, vipPort=self.servers[1].port))
        log.info("worker %d (pid %d) serving on %s and %s", self.wid, os.getpid(),
                 self.servers[0].address, self.servers[1].address)
        await self._stop.wait()
        await self.shutdown()
        return 0

    async def shutdown(self) -> None:
        if self._metrics is not None:
            await self._metrics.stop()
        if self.acl_watch is not None:
            await self.acl_watch.stop()
        if self.hand_over is not None:
            await self.hand_over.stop()  # siblings send no more sockets here
        for srv in self.servers:  # stop accepting; keep the open connections for now
            if srv._server is not None:
                srv._server.close()
        if self.holds is not None:
            self.holds.release_all()
        deadline = time.monotonic() + self.cfg.shutdownGraceMillis / 1000.0
        while time.monotonic() < deadline and any(
                c._tasks for srv in self.servers for c in srv.connections):
            await asyncio.sleep(0.02)
        for srv in self.servers:
            await srv.close()
        if self.holds is not None:
            self.holds.close()
        if self.ctl is not None:
            self.ctl.close()
        if self.store is not None:
            self.store.close()
        log.info("worker %d stopped", self.wid)

    def _ctl_closed(self, conn: Connection) -> None:
        if not self._stop.is_set():
            log.warning("worker %d: the supervisor's control channel closed; shutting down", self.wid)
            self._stop.set()

    # ================================================================ channels ==
    def _on_connect(self, conn: Connection) -> None:
        self._seq += 1
        chan = f"{self.wid}:{os.getpid()}.{self._seq}"  # unique across restarts of this worker
        conn.context["chan"] = chan
        self.channels[chan] = conn
        if self.hand_over is not None:
            self.hand_over.count(1)

    def _on_close(self, conn: Connection) -> None:
        chan = conn.context.get("chan")
        self.channels.pop(chan, None)
        if self.hand_over is not None:
            self.hand_over.count(-1)
        if conn.context.get("client") and self.ctl is not None and not self.ctl.closed:
            self.ctl.send_oneway(cc.ctl(Ctl.CHANNEL_CLOSED, chan=chan))

    def _ctl_handlers(self):
        return {
            Ctl.TOPICS_CHANGED: self._topics_changed,
            Ctl.NOTIFY_IDS_CHANGED: self._notify_ids_changed,
            Ctl.CLOSE_CHANNEL: self._close_channels,
            Ctl.FORWARD: self._forward,
            Ctl.CALL: self._call,
        }

    def _topics_changed(self, conn: Connection, cmd):
        self.topics.replace(cmd.body)
        if self._send_fast is not None:
            self._send_fast.topics_changed(self.topics.table)  # a new topic's first send C's too
        return cmd.make_response()  # the supervisor awaits it after an admin's change (oneway: dropped)

    def _notify_ids_changed(self, conn: Connection, cmd) -> None:
        group = cmd.ext_fields["group"]
        for chan in cmd.ext_fields.get("chans", "").split(","):
            c = self.channels.get(chan)
            if c is not None and not c.closed:
                c.send_oneway(request(RequestCode.NOTIFY_CONSUMER_IDS_CHANGED, consumerGroup=group))

    def _forward(self, conn: Connection, cmd) -> None:
        inner = decode_command(cmd.body)
        for chan in cmd.ext_fields.get("chans", "").split(","):
            c = self.channels.get(chan)
            if c is not None and not c.closed:
                c.send_oneway(RemotingCommand(code=inner.code, ext_fields=dict(inner.ext_fields), body=inner.body))

    async def _call(self, conn: Connection, cmd) -> RemotingCommand:
        """Send a request on one client channel and answer with the client's response (as a
        frame body): GET_CONSUMER_RUNNING_INFO, CONSUME_MESSAGE_DIRECTLY, PUSH_REPLY_MESSAGE_TO_CLIENT."""
        c = self.channels.get(cmd.ext_fields.get("chan", ""))
        if c is None or c.closed:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE, "channel closed")
        inner = decode_command(cmd.body)
        try:
            resp = await c.send_request(RemotingCommand(code=inner.code, ext_fields=dict(inner.ext_fields),
                                                        body=inner.body),
                                        float(cmd.ext_fields.get("timeout", "10")))
        except RemotingTimeout as e:
            return cmd.make_response(ResponseCode.CONSUME_MSG_TIMEOUT, str(e))
        except RemotingClosed as e:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(e))
        return cmd.make_response(body=encode_command(resp)[4:])

    def _close_channels(self, conn: Connection, cmd) -> None:
        for chan in cmd.ext_fields.get("chans", "").split(","):
            c = self.channels.get(chan)
            if c is not None:
                c.context.pop("client", None)  # the supervisor dropped it already
                c.close()

    # ================================================================ shared helpers ==
    async def ctl_call(self, cmd, ok=(0,)):
        if self.ctl is None or self.ctl.closed:
            from shmq.errors import ServiceNotAvailable
            raise ServiceNotAvailable(14, "the broker is shutting down")
        return await cc.call(self.ctl, cmd, ok=ok)

    async def fetch_topic(self, topic: str) -> TopicConfig | None:
        """The topic as the supervisor knows it (a creation another worker made may not have
        reached this worker's copy yet)."""
        resp = await self.ctl_call(cc.ctl(Ctl.GET_TOPIC, topic=topic), ok=(0, 17))
        if resp.code != 0:
            return None
        tc = decode_json(resp.body, TopicConfig)
        self.topics.table.setdefault(topic, tc)
        return tc

    async def auto_create_topic(self, topic: str, default_topic: str, queue_nums: int, sysflag: int) -> TopicConfig | None:
        resp = await self.ctl_call(cc.ctl(Ctl.AUTO_CREATE_TOPIC, topic=topic, defaultTopic=default_topic,
                                          queueNums=queue_nums, sysFlag=sysflag), ok=(0, 17))
        if resp.code != 0:
            return None
        tc = decode_json(resp.body, TopicConfig)
        self.topics.table.setdefault(topic, tc)
        return tc

    def _on_new_topic(self, topic: str, queue_nums: int) -> None:
        """The put pipeline is about to put into a topic it chose (%RETRY%G, %DLQ%G): make
        sure the topic exists (1 queue, perm 6), here at once and at the supervisor."""
        if topic in self.topics.table:
            return
        tc = TopicConfig(topicName=topic, readQueueNums=queue_nums, writeQueueNums=queue_nums, perm=PERM_RW)
        self.topics.table[topic] = tc
        if self.ctl is not None and not self.ctl.closed:
            self.ctl.send_oneway(cc.ctl(Ctl.CREATE_TOPIC, encode_json(tc), ifAbsent="true"))

    async def create_topic(self, tc: TopicConfig) -> None:
        await self.ctl_call(cc.ctl(Ctl.CREATE_TOPIC, encode_json(tc)))
        self.topics.table[tc.topicName] = tc

    def remember_subscription(self, group: str, sub: SubscriptionData) -> None:
        # the newest version any member of the group sent wins (as at the supervisor, clients.py);
        # subVersion is an int (SubscriptionData.__post_init__)
        e = self._subs.get((group, sub.topic))
        if e is None or sub.subVersion >= e[0].subVersion:
            self._subs[(group, sub.topic)] = (sub, time.monotonic() + 3600.0)
            self.sub_epoch += 1

    def cached_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        e = self._subs.get((group, topic))
        if e is None or e[1] < time.monotonic():
            return None
        return e[0]

    def cached_subscription_until(self, group: str, topic: str) -> float:
        e = self._subs.get((group, topic))
        return 0.0 if e is None else e[1]

    async def fetch_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        resp = await self.ctl_call(cc.ctl(Ctl.SUBSCRIPTION, group=group, topic=topic), ok=(0, 24))
        self.sub_epoch += 1
        if resp.code != 0:
            self._subs.pop((group, topic), None)
            return None
        sub = decode_json(resp.body, SubscriptionData)
        self._subs[(group, topic)] = (sub, time.monotonic() + _SUB_TTL)
        return sub


def main() -> int:
    logging.basicConfig(level=os.environ.get("SHMQ_LOG_LEVEL", "INFO").upper(),
                        format="%(asctime)s %(levelname)s %(name)s[w%(process)d]: %(message)s", stream=sys.stderr)
    cfg = BrokerConfig.from_json(os.environ["SHMQ_BROKER_CONFIG"])
    wid = int(os.environ["SHMQ_WORKER_ID"])
    try:
        return loops.run(Worker(cfg, wid).run())
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
