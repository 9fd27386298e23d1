"""Registration with every NameServer (RocketMQ's ``BrokerOuterAPI``), run by the supervisor.

The broker registers its topic table with each NameServer every ``registerNameServerPeriod``
(30 s) and at once when a topic changes (``trigger``), over one persistent connection per
NameServer: a NameServer drops a broker whose registering connection closes, so the
connection is kept open. A NameServer that is down is retried at the next round and does
not delay the others (they are registered concurrently). At shutdown the broker unregisters.
"""
from __future__ import annotations

import asyncio
import logging

from shmq.message.layout import masked_crc32
from shmq.protocol import RemotingClient, RequestCode, request
from shmq.protocol.bodies import RegisterBrokerBody, encode_register_body
from shmq.protocol.headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from shmq.service import AsyncService

from shmq.broker.shared.config import BrokerConfig
from shmq.broker.shared.topics import TopicTable

log = logging.getLogger("shmq.broker.register")


class Registrar:
    def __init__(self, cfg: BrokerConfig, topics: TopicTable, timeout: float = 6.0, on_result=None):
        self.cfg = cfg
        #: (haServerAddr, masterAddr) of each NameServer's answer: how a slave finds its master
        self.on_result = on_result
        self.topics = topics
        self.timeout = timeout
        self.clients = {addr: RemotingClient(addr, name="register") for addr in cfg.namesrv_list}
        # Every registerNameServerPeriod, or at once after trigger(); a NameServer that is down
        # is logged by _register_one and retried next round.
        self.service = AsyncService("shmq-register", cfg.registerNameServerPeriod / 1000.0,
                                    self.register_all, log=log)
        self.rounds = 0

    def trigger(self) -> None:
        """Register again soon (a topic changed)."""
        self.service.wake()

    async def start(self) -> None:
        """Register once, then every period. The first round is awaited (as RocketMQ's
        BrokerController.start does): a broker that says it is up must already be routable,
        or a client starting right after finds no route and waits a whole poll interval for
        one. A NameServer that is down costs at most ``timeout`` here and is retried."""
        if self.clients:
            await self.register_all()
            self.service.start()

    def _header(self) -> RegisterBrokerRequestHeader:
        c = self.cfg
        return RegisterBrokerRequestHeader(
            brokerName=c.brokerName, brokerAddr=c.broker_addr, clusterName=c.brokerClusterName,
            haServerAddr=f"{c.brokerIP1}:{c.ha_port}", brokerId=c.brokerId, compressed=False,
            bodyCrc32=0)

    async def register_all(self) -> None:
        wrapper = self.topics.wrapper()
        if self.cfg.brokerPermission != 6:
            # The broker's own permission caps every topic's (RocketMQ does the same).
            for name, tc in list(wrapper.topicConfigTable.items()):
                wrapper.topicConfigTable[name] = type(tc)(**{**{f: getattr(tc, f) for f in tc.__struct_fields__},
                                                            "perm": tc.perm & self.cfg.brokerPermission})
        body = encode_register_body(RegisterBrokerBody(topicConfigSerializeWrapper=wrapper))
        h = self._header()
        h.bodyCrc32 = masked_crc32(body)
        self.rounds += 1
        await asyncio.gather(*(self._register_one(addr, c, h, body) for addr, c in self.clients.items()))

    async def _register_one(self, addr: str, client: RemotingClient, h: RegisterBrokerRequestHeader,
                            body: bytes) -> None:
        try:
            resp = await client.invoke(request(RequestCode.REGISTER_BROKER, h, body), self.timeout)
            if resp.code != 0:
                log.warning("NameServer %s refused the registration: %s %s", addr, resp.code, resp.remark)
            elif self.on_result is not None:
                ext = resp.ext_fields or {}
                self.on_result(ext.get("haServerAddr") or None, ext.get("masterAddr") or None)
        except Exception as e:  # noqa: BLE001 - a NameServer being down is routine
            log.warning("cannot register with NameServer %s: %s", addr, e)

    async def close(self) -> None:
        """Stop the loop and unregister from every NameServer."""
        await self.service.stop()
        c = self.cfg
        h = UnRegisterBrokerRequestHeader(brokerName=c.brokerName, brokerAddr=c.broker_addr,
                                          clusterName=c.brokerClusterName, brokerId=c.brokerId)

        async def one(addr: str, client: RemotingClient) -> None:
            try:
                await client.invoke(request(RequestCode.UNREGISTER_BROKER, h), 3.0)
            except Exception as e:  # noqa: BLE001
                log.info("cannot unregister from NameServer %s: %s", addr, e)
            await client.close()

        await asyncio.gather(*(one(a, cl) for a, cl in self.clients.items()))
