"""Replication in the supervisor (RocketMQ's BrokerController HA wiring + SlaveSynchronize).

A master (ASYNC_MASTER / SYNC_MASTER) runs the store's HA service on ``haListenPort``
(listenPort + 1 by default; with an automatically picked listenPort and that port taken, a
free one: the NameServers tell slaves which). A SLAVE runs the HA client towards
``haMasterAddress`` or, when that is empty, the haServerAddr the NameServers answer its
registration with; and every ``slaveSynchronizeInterval`` it copies from the master's
broker port what a slave needs to take over reads (SlaveSynchronize.syncAll): the topic
table (GET_ALL_TOPIC_CONFIG 21), consumer offsets (GET_ALL_CONSUMER_OFFSET 43), delay
progress (GET_ALL_DELAY_OFFSET 45) and subscription groups (GET_ALL_SUBSCRIPTIONGROUP_CONFIG
201). A master that is down or refuses one of them is logged and tried again next round.
"""
from __future__ import annotations

import asyncio
import logging
import os

from shmq.protocol import RemotingClient, RequestCode, request
from shmq.protocol.bodies import TopicConfigSerializeWrapper, decode_json
from shmq.service import AsyncService
from shmq.store import files
from shmq.store.ha import HAClient, HAService
from shmq.store.offsets_file import loads_int_keys

from shmq.broker.shared.config import BrokerConfig

log = logging.getLogger("shmq.broker.ha")

DELAY_OFFSET_FILE = "delayOffset.json"
SUBSCRIPTION_GROUP_FILE = "subscriptionGroup.json"


class Replication:
    def __init__(self, cfg: BrokerConfig, store, topics, adopt_topics):
        self.cfg = cfg
        self.store = store
        self.topics = topics
        self.adopt_topics = adopt_topics  # (wrapper) -> None: replace the table, tell workers
        self.service: HAService | None = None
        self.client: HAClient | None = None
        self.master_addr: str | None = None   # the master's broker (remoting) address
        # A slave copies the master's tables every slaveSynchronizeInterval (the first time
        # after at most 3 s); a master down is logged per table and retried next round.
        period = cfg.slaveSynchronizeInterval / 1000.0
        self._sync = AsyncService("shmq-slave-sync", period, self._sync_round, log=log,
                                  first_delay_s=min(3.0, period))
        self._master_client: RemotingClient | None = None
        self.sync_rounds = 0

    # ------------------------------------------------------------------ life ----
    def start(self) -> None:
        cfg = self.cfg
        if cfg.is_slave:
            self.client = HAClient(self.store, cfg.haMasterAddress or None,
                                   heartbeat_ms=cfg.haSendHeartbeatInterval,
                                   housekeeping_s=cfg.haHousekeepingInterval / 1000.0)
            self.client.start()
            self._sync.start()
            return
        try:
            self.service = HAService(self.store, cfg.listenAddress, cfg.ha_port,
                                     heartbeat_ms=cfg.haSendHeartbeatInterval,
                                     housekeeping_ms=cfg.haHousekeepingInterval)
        except OSError as e:
            if cfg.haListenPort:
                raise OSError(f"cannot listen on haListenPort {cfg.haListenPort}: {e}") from e
            log.warning("HA port %d (listenPort + 1) is taken (%s); using a free one", cfg.ha_port, e)
            self.service = HAService(self.store, cfg.listenAddress, 0, heartbeat_ms=cfg.haSendHeartbeatInterval,
                                     housekeeping_ms=cfg.haHousekeepingInterval)
        cfg.haListenPort = self.service.port  # what registration announces as haServerAddr
        self.service.start()

    async def close(self) -> None:
        await self._sync.stop()
        if self._master_client is not None:
            await self._master_client.close()
        if self.client is not None:
            await asyncio.to_thread(self.client.stop)
        if self.service is not None:
            await asyncio.to_thread(self.service.stop)

    # ------------------------------------------------------------------ slave ----
    def on_register_result(self, ha_server_addr: str | None, master_addr: str | None) -> None:
        """A NameServer's answer to this broker's registration (BrokerController
        .doRegisterBrokerAll): a slave learns where its master is."""
        if self.client is None:
            return
        if not self.cfg.haMasterAddress and ha_server_addr:
            self.client.set_master(ha_server_addr)
        if master_addr and master_addr != self.master_addr:
            log.info("master of %s is %s", self.cfg.brokerName, master_addr)
            self.master_addr = master_addr
            if self._master_client is not None:
                asyncio.get_running_loop().create_task(self._master_client.close())
                self._master_client = None

    async def _sync_round(self) -> None:
        if self.master_addr:
            await self.sync_all()

    async def sync_all(self) -> None:
        if self._master_client is None:
            self._master_client = RemotingClient(self.master_addr, name="slave-sync")
        for what, fn in (("topic config", self._sync_topics), ("consumer offsets", self._sync_offsets),
                         ("delay offsets", self._sync_delay), ("subscription groups", self._sync_groups)):
            try:
                await fn()
            except Exception as e:  # noqa: BLE001 - a master down is routine; next round
                log.warning("slave sync of %s from %s failed: %s", what, self.master_addr, e)
        self.sync_rounds += 1

    async def _fetch(self, code: int) -> bytes:
        resp = await self._master_client.invoke(request(code), 5.0)
        if resp.code != 0:
            raise RuntimeError(f"master answered {resp.code} {resp.remark}")
        return resp.body or b""

    async def _sync_topics(self) -> None:
        w = decode_json(await self._fetch(RequestCode.GET_ALL_TOPIC_CONFIG), TopicConfigSerializeWrapper)
        if w.dataVersion != self.topics.version or w.topicConfigTable != self.topics.table:
            self.adopt_topics(w)
            log.info("slave topic config updated from the master (%d topics)", len(w.topicConfigTable))

    async def _sync_offsets(self) -> None:
        data = loads_int_keys((await self._fetch(RequestCode.GET_ALL_CONSUMER_OFFSET)).decode())
        for key, queues in (data.get("offsetTable") or {}).items():
            for qid, off in queues.items():
                self.store._offset_set(key, int(qid), int(off))

    async def _sync_delay(self) -> None:
        body = await self._fetch(RequestCode.GET_ALL_DELAY_OFFSET)
        if body:
            self._write_config(DELAY_OFFSET_FILE, body)

    async def _sync_groups(self) -> None:
        body = await self._fetch(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
        if body:
            self._write_config(SUBSCRIPTION_GROUP_FILE, body)

    def _write_config(self, name: str, body: bytes) -> None:
        path = os.path.join(self.store.cfg.config_dir, name)
        try:
            with open(path, "rb") as f:
                if f.read() == body:
                    return
        except FileNotFoundError:
            pass
        files.write_atomic(path, body, 0o644)

    def describe(self) -> dict:
        if self.client is not None:
            return {"role": "SLAVE", "master": self.client.master, "connected": self.client.connected.is_set(),
                    "received": self.client.replica.received, "commit": self.store.commit_pos}
        conns = self.service.connections if self.service else []
        return {"role": self.cfg.brokerRole, "haPort": self.cfg.haListenPort,
                "slaves": [{"peer": c.peer, "acked": c.acked, "sent": c.sent} for c in conns]}


__all__ = ["Replication"]
