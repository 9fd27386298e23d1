"""The supervisor's end of the control channel: the per-broker tables and their handlers.

Holds the three things that must be one per broker, whatever the number of workers: the topic table (single
writer of topics.json), the client registry and the queue-lock table. Workers reach them
with the requests of :mod:`control_channel`; this module answers them and pushes changes
back (topic table, NOTIFY_CONSUMER_IDS_CHANGED, channel closes). Everything here runs on
the supervisor's event loop, so the tables need no locks.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Callable

import msgspec

from shmq.broker.shared.config import BrokerConfig
from shmq.broker.shared.control_channel import Ctl, ctl
from shmq.broker.shared.topics import TopicTable, derive_from_default
from shmq.message.names import PERM_RW, TBW102, retry_topic
from shmq.protocol import RemotingCommand, ResponseCode
from shmq.protocol.bodies import (ConsumerListBody, HeartbeatData, LockBatchRequestBody, LockBatchResponseBody,
                                  TopicConfig, decode_json, encode_json)
from shmq.protocol.codes import Perm
from shmq.protocol.transport import Connection

from .clients import ChannelInfo, ClientRegistry, worker_of
from .admin_plane import AdminPlane
from .locks import LockTable
from shmq.broker.shared.topics import config_path

log = logging.getLogger("shmq.broker.control")

#: how long an admin's topic change waits for each worker to take the new table
TOPICS_ACK_TIMEOUT = 3.0


class ControlPlane:
    def __init__(self, cfg: BrokerConfig, topics: TopicTable, on_topics_changed: Callable[[], None],
                 clock: Callable[[], float] = time.monotonic):
        self.cfg = cfg
        self.topics = topics
        self.on_topics_changed = on_topics_changed
        self.clock = clock
        self.clients = ClientRegistry()
        self.locks = LockTable(cfg.rebalanceLockMaxLiveTime / 1000.0)
        self.workers: dict[int, Connection] = {}
        self.ready: dict[int, asyncio.Event] = {}
        self.ports: dict[int, tuple[int, int]] = {}
        self.admin = AdminPlane(self, os.path.dirname(config_path(cfg.store_root)))

    def handlers(self):
        return {
            Ctl.HELLO: self.hello,
            Ctl.READY: self.worker_ready,
            Ctl.GET_TOPIC: self.get_topic,
            Ctl.CREATE_TOPIC: self.create_topic,
            Ctl.AUTO_CREATE_TOPIC: self.auto_create_topic,
            Ctl.DELETE_TOPIC: self.delete_topic,
            Ctl.HEARTBEAT: self.heartbeat,
            Ctl.UNREGISTER: self.unregister,
            Ctl.CHANNEL_CLOSED: self.channel_closed,
            Ctl.CONSUMER_LIST: self.consumer_list,
            Ctl.SUBSCRIPTION: self.subscription,
            Ctl.LOCK: self.lock,
            Ctl.UNLOCK: self.unlock,
            Ctl.FORWARD_TO_GROUP: self.forward_to_group,
            **self.admin.handlers(),
        }

    # ---- workers coming and going ----------------------------------------------------------
    def on_connect(self, conn: Connection) -> None:
        pass

    def on_close(self, conn: Connection) -> None:
        wid = conn.context.get("worker")
        if wid is None or self.workers.get(wid) is not conn:
            return
        del self.workers[wid]
        self.ready.pop(wid, None)
        groups = self.clients.worker_gone(wid)
        log.info("worker %d left the control channel; %d consumer group(s) changed", wid, len(groups))
        for g in groups:
            self.notify(g)

    def hello(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        wid = int(cmd.ext_fields["worker"])
        old = self.workers.get(wid)
        if old is not None and old is not conn:
            # A restarted worker said HELLO before its predecessor's connection was seen to
            # close: drop the predecessor's channels now (its on_close will find itself replaced).
            del self.workers[wid]
            old.close()
            for g in self.clients.worker_gone(wid):
                self.notify(g)
        conn.context["worker"] = wid
        conn.context["pid"] = int(cmd.ext_fields.get("pid", 0))
        self.workers[wid] = conn
        self.ready.setdefault(wid, asyncio.Event())
        return cmd.make_response(body=self.topics.encode())

    def worker_ready(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        wid = conn.context.get("worker")
        if wid is not None:
            self.ports[wid] = (int(cmd.ext_fields.get("port", 0)), int(cmd.ext_fields.get("vipPort", 0)))
            self.ready.setdefault(wid, asyncio.Event()).set()
        return cmd.make_response()

    # ---- topics -----------------------------------------------------------------------------
    def _topics_changed(self) -> None:
        body = self.topics.encode()
        for conn in list(self.workers.values()):
            if not conn.closed:
                conn.send_oneway(ctl(Ctl.TOPICS_CHANGED, body))
        self.on_topics_changed()

    async def _topics_changed_everywhere(self) -> None:
        """The new table sent to every worker, returning once each has taken it (or is gone):
        an admin's create, update or delete is answered after that, so the client's next
        request on any worker sees it (a oneway could be read after that request). A worker
        that does not answer in time is left to the table it gets with the next change."""
        body = self.topics.encode()
        calls = [conn.send_request(ctl(Ctl.TOPICS_CHANGED, body), timeout=TOPICS_ACK_TIMEOUT)
                 for conn in list(self.workers.values()) if not conn.closed]
        for r in await asyncio.gather(*calls, return_exceptions=True):
            if isinstance(r, Exception):
                log.warning("a worker did not confirm the new topic table: %s", r)
        self.on_topics_changed()

    def adopt_topics(self, wrapper) -> None:
        """A slave takes its master's whole topic table (SlaveSynchronize.syncTopicConfig)."""
        self.topics.table = dict(wrapper.topicConfigTable)
        self.topics.version = wrapper.dataVersion
        self.topics.persist()
        self._topics_changed()

    def ensure_topic(self, tc: TopicConfig) -> TopicConfig:
        """Create ``tc`` unless a topic of that name exists; returns the config in force."""
        cur = self.topics.get(tc.topicName)
        if cur is not None:
            return cur
        self.topics.put(tc)
        self._topics_changed()
        return tc

    def get_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        tc = self.topics.get(cmd.ext_fields.get("topic", ""))
        if tc is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, "no such topic")
        return cmd.make_response(body=encode_json(tc))

    async def create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        tc = decode_json(cmd.body, TopicConfig)
        if cmd.ext_fields.get("ifAbsent") == "true":
            return cmd.make_response(body=encode_json(self.ensure_topic(tc)))
        if self.topics.put(tc):
            await self._topics_changed_everywhere()
        return cmd.make_response(body=encode_json(tc))

    def auto_create_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        topic = e["topic"]
        cur = self.topics.get(topic)
        if cur is None:
            default = self.topics.get(e.get("defaultTopic", ""))
            if default is not None and default.topicName == TBW102 and not self.cfg.autoCreateTopicEnable:
                default = None  # RocketMQ strips INHERIT from TBW102 when auto-creation is off
            cur = derive_from_default(topic, default, int(e.get("queueNums", "4")), int(e.get("sysFlag", "0")))
            if cur is None:
                return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, "cannot create")
            cur = self.ensure_topic(cur)
        return cmd.make_response(body=encode_json(cur))

    async def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if self.topics.delete(cmd.ext_fields["topic"]):
            await self._topics_changed_everywhere()
        return cmd.make_response()

    # ---- clients ----------------------------------------------------------------------------
    def heartbeat(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        hb = decode_json(cmd.body, HeartbeatData)
        now = self.clock()
        info = ChannelInfo(chan=e["chan"], client_id=hb.clientID, language=e.get("language", "JAVA"),
                           version=int(e.get("version", "0")), addr=e.get("addr", "?"), last_update=now)
        for cd in hb.consumerDataSet:
            # %RETRY%<group> exists as soon as the group does (createTopicInSendMessageBackMethod).
            self.ensure_topic(TopicConfig(topicName=retry_topic(cd.groupName), readQueueNums=1,
                                          writeQueueNums=1, perm=PERM_RW))
            if self.clients.register_consumer(cd, info):
                log.info("consumer group %s changed: %s on %s", cd.groupName, hb.clientID, info.chan)
                self.notify(cd.groupName)
        for pd in hb.producerDataSet:
            self.clients.register_producer(pd.groupName, info)
        return cmd.make_response()

    def unregister(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        chan = e["chan"]
        if e.get("producerGroup"):
            self.clients.unregister_producer(e["producerGroup"], chan)
        group = e.get("consumerGroup")
        if group and self.clients.unregister_consumer(group, chan):
            self.notify(group)
        return cmd.make_response()

    def channel_closed(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        for g in self.clients.channel_closed(cmd.ext_fields["chan"]):
            self.notify(g)
        return cmd.make_response()

    def consumer_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields["group"]
        ids = self.clients.consumer_ids(group)
        if not ids:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"no consumer for this group, {group}")
        return cmd.make_response(body=encode_json(ConsumerListBody(consumerIdList=ids)))

    def subscription(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        s = self.clients.subscription(cmd.ext_fields["group"], cmd.ext_fields["topic"])
        if s is None:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_NOT_EXIST, "none")
        return cmd.make_response(body=msgspec.json.encode(s))

    def lock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = decode_json(cmd.body, LockBatchRequestBody)
        ok = self.locks.try_lock(req.consumerGroup, req.clientId, req.mqSet, self.clock())
        return cmd.make_response(body=encode_json(LockBatchResponseBody(lockOKMQSet=ok)))

    def unlock(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        req = decode_json(cmd.body, LockBatchRequestBody)
        self.locks.unlock(req.consumerGroup, req.clientId, req.mqSet)
        return cmd.make_response()

    def forward_to_group(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        n = self.forward(e["group"], cmd.body, consumers=e.get("kind", "consumer") == "consumer",
                         one=e.get("one") == "true")
        return cmd.make_response(ext_fields={"count": str(n)})

    # ---- pushes -------------------------------------------------------------------------------
    def forward(self, group: str, frame: bytes, *, consumers: bool = True, one: bool = False) -> int:
        """Send a broker->client request (``frame``: an encoded command without its length
        word) oneway to the group's consumer or producer channels (``one``: to one live
        channel only, the most recently heard from). Returns how many channels it went to."""
        if consumers:
            g = self.clients.consumers.get(group)
            infos = list(g.channels.values()) if g else []
        else:
            infos = list(self.clients.producers.get(group, {}).values())
        infos = [i for i in infos if worker_of(i.chan) in self.workers]
        if one and infos:
            infos = [max(infos, key=lambda i: i.last_update)]
        by_worker: dict[int, list[str]] = {}
        for i in infos:
            by_worker.setdefault(worker_of(i.chan), []).append(i.chan)
        for wid, chans in by_worker.items():
            self.workers[wid].send_oneway(ctl(Ctl.FORWARD, frame, chans=",".join(chans)))
        return len(infos)

    def forward_threadsafe(self, loop: asyncio.AbstractEventLoop, group: str, frame: bytes, *,
                           consumers: bool = False, one: bool = True, timeout: float = 5.0) -> int:
        """:meth:`forward` from another thread (a supervisor service such as the transaction
        check-back): runs on the event loop, which owns the tables."""
        async def run() -> int:
            return self.forward(group, frame, consumers=consumers, one=one)
        try:
            return asyncio.run_coroutine_threadsafe(run(), loop).result(timeout)
        except (TimeoutError, RuntimeError):  # the loop is closing or busy: nobody asked
            return 0

    def notify(self, group: str) -> None:
        """NOTIFY_CONSUMER_IDS_CHANGED to every member of ``group``, each on its own connection
        (the worker holding it sends it)."""
        if not self.cfg.notifyConsumerIdsChangedEnable:
            return
        by_worker: dict[int, list[str]] = {}
        for chan in self.clients.channels_of(group):
            by_worker.setdefault(worker_of(chan), []).append(chan)
        for wid, chans in by_worker.items():
            conn = self.workers.get(wid)
            if conn is not None and not conn.closed:
                conn.send_oneway(ctl(Ctl.NOTIFY_IDS_CHANGED, group=group, chans=",".join(chans)))

    def scan_clients(self) -> int:
        """Drop channels silent longer than channelExpiredTimeout; close their connections and
        tell the groups. Returns how many were dropped."""
        expired = self.clients.expired(self.clock(), self.cfg.channelExpiredTimeout / 1000.0)
        if not expired:
            return 0
        by_worker: dict[int, list[str]] = {}
        for chan in expired:
            by_worker.setdefault(worker_of(chan), []).append(chan)
        groups = self.clients.drop_channels(lambda i: i.chan in expired)
        log.info("dropped %d client channel(s) silent for more than %d ms", len(expired),
                 self.cfg.channelExpiredTimeout)
        for wid, chans in by_worker.items():
            conn = self.workers.get(wid)
            if conn is not None and not conn.closed:
                conn.send_oneway(ctl(Ctl.CLOSE_CHANNEL, chans=",".join(chans)))
        for g in groups:
            self.notify(g)
        return len(expired)


def topic_perm_ok(tc: TopicConfig, write: bool) -> bool:
    return bool(tc.perm & (Perm.WRITE if write else Perm.READ))
