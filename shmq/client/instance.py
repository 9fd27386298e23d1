"""ClientInstance (RocketMQ's MQClientInstance): what the producers and consumers of one
process share for one set of NameServers: an asyncio loop on its own thread (client/handoff.py's
ClientLoop), one connection per server, the route cache, heartbeats and the handlers for requests
brokers send us. Public methods are called from user threads; they hand coroutines to the loop
thread and wait for them (``call``). Everything that touches connections runs on the loop.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import random
import socket
import threading
import time
from collections.abc import Coroutine
from typing import Any

from shmq.errors import RemotingConnectError, RemotingError, ShmqError, TopicNotExist
from shmq.message.names import TBW102
from shmq.protocol import RemotingClient, RemotingCommand, RequestCode, ResponseCode, request
from shmq.protocol.acl_sign import Credentials
from shmq.protocol.transport import SCATTER_BODY as _FRAME_BODY_MAX  # larger: sent as a RemotingCommand
from shmq.protocol.bodies import HeartbeatData, ProducerData, TopicRouteData, decode_topic_route, encode_json
from shmq.service import AsyncService

from . import direct_write
from .direct_write import DirectWrites
from .handoff import ClientLoop
from .oneway import MARK, Lane, wait_room
from .remote_send import RemoteSend, answers
from .request_start import failed, send_oneways, start_asyncs, start_lane, start_one, start_timers
from .route import TopicPublishInfo, publish_info, subscribe_queues

log = logging.getLogger("shmq.client")

ROUTE_POLL_S = 30.0
HEARTBEAT_S = 30.0
#: How long an address that refused a connection is passed over by readers.
UNREACHABLE_S = 5.0
#: A oneway send waits while this many requests (RocketMQ: semaphoreOneway, 65535) or bytes of
#: bodies are submitted and not yet written, or while its connection's write buffer is over
#: asyncio's high-water mark
ONEWAY_BACKLOG = 65535
ONEWAY_BACKLOG_BYTES = 16 * 1024 * 1024
_ids = itertools.count(1)


def client_ip() -> str:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("127.0.0.1", 9))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


class ClientInstance:
    _registry: dict[str, "ClientInstance"] = {}
    _registry_lock = threading.Lock()

    @classmethod
    def acquire(cls, namesrv: str, *, producer_group: str | None = None, consumer_group: str | None = None,
                **settings) -> "ClientInstance":
        """The shared instance for these NameServers, or a new one when this process already
        runs a member of the same group there (a second consumer of a group in one process
        is a second client, with its own client id, as Java's instanceName makes it)."""
        with cls._registry_lock:
            for n in itertools.count():
                creds = settings.get("credentials")
                key = f"{os.getpid()}|{namesrv}|{creds.access_key if creds else ''}|{n}"
                inst = cls._registry.get(key)
                if inst is None or inst._closed:
                    inst = cls._registry[key] = cls(namesrv, **settings)
                if producer_group in inst.producers or consumer_group in inst.consumers:
                    continue
                inst._refs += 1
                return inst

    @property
    def rpc_hook(self):
        """The request signer every request of this client goes through, or None."""
        return self._rpc_hook

    @rpc_hook.setter
    def rpc_hook(self, hook) -> None:
        # the lane's copy is what the C sends look at (native/async_plain.c: a signed request is
        # the Python path's), one load a send instead of this attribute's read
        self._rpc_hook = hook
        lane = self.__dict__.get("oneway_lane")
        if lane is not None:
            lane.hooked = hook is not None

    def __init__(self, namesrv: str, *, route_poll_s: float = ROUTE_POLL_S, heartbeat_s: float = HEARTBEAT_S,
                 credentials: Credentials | None = None):
        addrs = [a.strip() for a in namesrv.replace(",", ";").split(";") if a.strip()]
        if not addrs:
            raise ValueError("at least one NameServer address is needed (host:port)")
        self.namesrv_addrs = addrs
        #: ACL credentials: every request this client sends is signed (AclClientRPCHook).
        self.credentials = credentials
        self.rpc_hook = credentials.sign if credentials is not None else None
        self.client_ip = client_ip()
        self.client_id = f"{self.client_ip}@{os.getpid()}#{next(_ids)}"
        self.route_poll_s = route_poll_s
        self.heartbeat_s = heartbeat_s
        self.routes: dict[str, TopicRouteData] = {}
        self.publish: dict[str, TopicPublishInfo] = {}
        self.broker_addrs: dict[str, dict[int, str]] = {}
        self._unreachable: dict[str, float] = {}  # addr -> monotonic time it may be tried again
        self.producers: dict[str, Any] = {}
        self.consumers: dict[str, Any] = {}
        self._clients: dict[str, RemotingClient] = {}
        self._refs = 0
        self._closed = False
        self._namesrv_index = random.randrange(len(addrs))
        self.loop = ClientLoop()  # its selector wakes the consume pools once the GIL is free
        # requests handed over from user threads (submit_request / submit_oneway), started
        # together on the loop (_drain_submitted)
        self._submitted: collections.deque = collections.deque()
        self._drain_scheduled = False
        # requests for an address whose connection is being opened, in submission order
        self._held: dict[str, collections.deque] = {}
        self._oneways = 0  # oneway sends submitted (submit_oneway)
        #: the plain oneway sends' frames (client/oneway.py); it also counts the bytes of the
        #: other oneway bodies submitted and not yet written or failed, against one bound
        self.oneway_lane = Lane(self._submitted.append, MARK, ONEWAY_BACKLOG_BYTES, ONEWAY_BACKLOG)
        self.oneway_lane.hooked = self._rpc_hook is not None
        # a lane frame may be written by its caller's thread when nothing is queued (client/direct_write.py);
        # _draining: jobs taken off the deque and not yet on their connection (no such write then)
        self._draining = False
        self.direct = DirectWrites(self.loop)
        if direct_write.enabled():
            self.oneway_lane.direct(self._direct_conn, self.direct.after, direct_write.GAP_NS)
        self._thread = threading.Thread(target=self._run_loop, name=f"shmq-client-{self.client_id}", daemon=True)
        self._thread.start()
        self._services = [self.every(self.route_poll_s, self.refresh_routes, "routes"),
                          self.every(self.heartbeat_s, self.heartbeat_all, "heartbeat")]

    # ---- the loop thread -------------------------------------------------------------------
    def _run_loop(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def call(self, coro: Coroutine, timeout: float | None = None):
        """Run ``coro`` on the loop and wait for its result (from a user thread)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError("ClientInstance.call from the loop thread would deadlock")
        fut = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return fut.result(timeout)
        except TimeoutError:
            fut.cancel()
            raise

    def call_soon(self, coro: Coroutine):
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def submit_request(self, addr: str, cmd, waiter, timeout: float) -> None:
        """Send ``cmd`` (a RemotingCommand, or a request that makes its frame: client.remote_send's
        RemoteSend) to ``addr`` from a user thread, its response to ``waiter`` on the loop
        thread (``Connection.start_request``; a RemotingTimeout after ``timeout`` s, or the
        connection error): ``send_async``, with no coroutine, task or future per request; a
        waiter of None sends it oneway (``submit_oneway``). The
        requests submitted before the loop gets to them share one wake-up of the loop thread (a
        self-pipe write and a thread switch each cost more than the send itself), leave in
        submission order in one write per connection, and share one timer. No lock: a deque's
        append and popleft are atomic, and the drain clears the flag before it takes the jobs, so
        a job appended after that flag was read set is still taken (at worst two drains run)."""
        self._submitted.append((addr, cmd, waiter, timeout))
        self.oneway_lane.seal()  # oneways put after this go behind it
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self.loop.call_soon_threadsafe(self._drain_submitted)

    def submit_oneway(self, addr: str, req, timeout: float) -> None:
        """A oneway request from a user thread, written by the loop with the others submitted in
        the same turn (no system call per message). Bounded: while ONEWAY_BACKLOG requests or
        ONEWAY_BACKLOG_BYTES of bodies wait (submitted, or held for a connection being opened),
        or the connection does not take more (the broker does not read), the caller waits;
        RemotingTimeout after ``timeout`` s of that."""
        self._oneways = k = self._oneways + 1
        # the connection's state is looked at every 32nd send (it moves by bursts, not by one)
        if self._oneway_full() or (not k & 31 and self._write_paused(addr)):
            wait_room(self, addr, timeout)
        self.oneway_lane.charge(len(req.body))  # the loop thread takes it off (GIL-atomic in C)
        self._submitted.append((addr, req, None, 0))  # submit_request's steps, inline
        self.oneway_lane.seal()
        if not self._drain_scheduled:
            self._drain_scheduled = True
            self.loop.call_soon_threadsafe(self._drain_submitted)

    def _oneway_full(self) -> bool:
        return len(self._submitted) >= ONEWAY_BACKLOG or self.oneway_lane.full()

    def _write_paused(self, addr: str) -> bool:
        """``addr``'s open connection takes no more (its transport is paused: the peer does not
        read). One being opened is not: what is held for it counts in ``_oneway_full``."""
        if addr in self._held:
            return False  # bounded by _oneway_full: what is held is not taken off yet
        c = self._clients.get(addr)
        conn = c.connection if c is not None else None
        return conn is not None and conn.writing_paused

    def _direct_conn(self, addr: str):
        """``addr``'s open connection when no submitted request waits to be written before a frame
        its caller's thread would write (native/lane_direct.c checks the connection), else None."""
        if self._submitted or self._draining or self._held or self._closed:
            return None
        c = self._clients.get(addr)
        return None if c is None else c.connection

    def _drain_submitted(self) -> None:
        self._drain_scheduled = False
        self._draining = True
        jobs = self._submitted
        timers: dict[tuple, list[int]] = {}
        last, client, conn = None, None, None
        oneways: list = []  # consecutive common oneway sends to conn, written together
        asyncs: list = []  # consecutive common async sends to conn (their jobs), started together
        taken = 0  # bytes of oneway bodies taken off (written or failed)
        lane = self.oneway_lane
        # what the drain writes leaves at its end, one write per connection in this callback:
        # through the connection's own flush callback it would wait for the loop's next turn (a
        # select and a callback more per wake-up of the loop thread, on each send's latency)
        deferred: list = []
        try:
            for _ in range(len(jobs)):  # the jobs there now: callers appending meanwhile wake another drain
                addr, cmd, waiter, timeout = job = jobs.popleft()
                if cmd is MARK:  # plain oneways and asyncs: this marker's segment is the lane's oldest (hot_oneway.c)
                    _, cmd, waiter, timeout = lane.take()  # waiter: its async sends by opaque, or None
                if asyncs and (waiter is None or addr != last or conn.closed):  # written in order
                    start_asyncs(conn, asyncs, timers)
                if addr != last or conn is None or conn.closed:
                    if oneways:
                        send_oneways(conn, oneways)
                    held = self._held.get(addr)
                    if held is not None:  # its connection is being opened: after the ones before it
                        if cmd.__class__ is bytes:
                            lane.charge(len(cmd))  # held frames still count against the bound
                        held.append((cmd, waiter, timeout))
                        last = None
                        continue
                    client = self._client(addr)
                    conn, last = client.connection, addr
                    if conn is not None and conn not in deferred and conn.defer_flush():
                        deferred.append(conn)
                    if conn is None:  # not connected yet (or again): one connect, the jobs held till then
                        if cmd.__class__ is bytes:
                            lane.charge(len(cmd))
                        self._held[addr] = collections.deque([(cmd, waiter, timeout)])
                        self.loop.create_task(self._connect_and_start(client))
                        last = None
                        continue
                if cmd.__class__ is bytes and waiter is not None:  # a lane segment with async sends
                    if oneways:
                        send_oneways(conn, oneways)
                    if asyncs:
                        start_asyncs(conn, asyncs, timers)
                    start_lane(conn, cmd, waiter, timeout, timers)
                    continue
                if waiter is None:
                    if cmd.__class__ is bytes:
                        if oneways:
                            send_oneways(conn, oneways)
                        conn.write_frame(cmd)
                        continue
                    taken += len(cmd.body)
                    if cmd.__class__ is RemoteSend and client.rpc_hook is None and len(cmd.body) < _FRAME_BODY_MAX:
                        oneways.append(cmd.frame)  # the common oneway send: _start's last case
                        continue
                if oneways:
                    send_oneways(conn, oneways)
                if cmd.__class__ is RemoteSend and client.rpc_hook is None and len(cmd.body) < _FRAME_BODY_MAX:
                    asyncs.append(job)  # the common async send: _start's last case, in a run
                    continue
                if asyncs:
                    start_asyncs(conn, asyncs, timers)
                start_one(client, conn, cmd, waiter, timeout, timers)
            if oneways:
                send_oneways(conn, oneways)
            if asyncs:
                start_asyncs(conn, asyncs, timers)
            lane.charge(-taken)
            start_timers(self.loop, timers)
        finally:
            for c in deferred:
                c.flush()
            self._draining = False

    async def _connect_and_start(self, client: RemotingClient) -> None:
        """Open ``client``'s connection, then start the requests held for it, in order (or fail
        each with the connect error)."""
        err: Exception | None = None
        try:
            conn = await client.connect()
        except Exception as e:  # noqa: BLE001
            if isinstance(e, RemotingConnectError):
                self._unreachable[client.addr] = time.monotonic() + UNREACHABLE_S  # as invoke()
            conn, err = None, e
        timers: dict[tuple, list[int]] = {}
        self._draining = True  # (the held requests first: no caller-thread write meanwhile)
        try:
            for cmd, waiter, timeout in self._held.pop(client.addr, ()):
                if waiter is None or cmd.__class__ is bytes:  # what was held counted against the bound
                    self.oneway_lane.charge(-(len(cmd) if cmd.__class__ is bytes else len(cmd.body)))
                if conn is None:
                    failed(waiter, err)
                else:
                    start_one(client, conn, cmd, waiter, timeout, timers)
        finally:
            self._draining = False
        start_timers(self.loop, timers)

    def every(self, interval: float, job, what: str) -> AsyncService:
        """Start ``job`` every ``interval`` s on the loop (routes, heartbeats, and the
        consumers' rebalance, offset persistence and lock renewal). A failed round is
        routine (a broker or NameServer away): logged at DEBUG, the next round retries.
        Stop it on the loop: ``await svc.stop()``."""
        svc = AsyncService(f"shmq-client-{what}", interval, job, log=log, error_level=logging.DEBUG)
        svc.start(self.loop)
        return svc

    # ---- connections ----------------------------------------------------------------------
    def _client(self, addr: str) -> RemotingClient:
        c = self._clients.get(addr)
        if c is None or c._closed:
            handlers = {
                RequestCode.NOTIFY_CONSUMER_IDS_CHANGED: self._on_ids_changed,
                RequestCode.RESET_CONSUMER_CLIENT_OFFSET: self._on_reset_offset,
                RequestCode.GET_CONSUMER_RUNNING_INFO: self._on_running_info,
                RequestCode.CHECK_TRANSACTION_STATE: self._on_check_transaction,
            }
            c = self._clients[addr] = RemotingClient(addr, handlers=handlers, name=f"to {addr}",
                                                              rpc_hook=self.rpc_hook, fast=answers)
        return c

    async def invoke(self, addr: str, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        try:
            return await self._client(addr).invoke(cmd, timeout)
        except RemotingConnectError:
            # a broker that refuses connections (killed, restarting): readers go to another
            # broker of the same name for a while (read_addr), as the route says one exists
            self._unreachable[addr] = time.monotonic() + UNREACHABLE_S
            raise

    async def connect(self, addr: str):
        """(client, open connection) to ``addr``, for requests answered in callbacks
        (``Connection.start_request``: client/tcp_pull.py); a refused connection marks ``addr``
        unreachable, as :meth:`invoke` does."""
        client = self._client(addr)
        try:
            return client, await client.connect()
        except RemotingConnectError:
            self._unreachable[addr] = time.monotonic() + UNREACHABLE_S
            raise

    async def invoke_oneway(self, addr: str, cmd: RemotingCommand) -> None:
        await self._client(addr).invoke_oneway(cmd)

    async def namesrv_invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Ask one NameServer (the last one that answered), failing over to the others."""
        last: Exception | None = None
        n = len(self.namesrv_addrs)
        for i in range(n):
            addr = self.namesrv_addrs[(self._namesrv_index + i) % n]
            try:
                resp = await self.invoke(addr, cmd, timeout)
                self._namesrv_index = (self._namesrv_index + i) % n
                return resp
            except RemotingError as e:
                last = e
        raise RemotingConnectError(f"no NameServer answered ({', '.join(self.namesrv_addrs)}): {last}")

    # ---- routes ----------------------------------------------------------------------------
    async def fetch_route(self, topic: str) -> TopicRouteData | None:
        resp = await self.namesrv_invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic))
        if resp.code == ResponseCode.TOPIC_NOT_EXIST:
            return None
        resp.raise_for_code()
        route = decode_topic_route(resp.body)
        self.routes[topic] = route
        self.publish[topic] = publish_info(topic, route)
        for bd in route.brokerDatas:
            self.broker_addrs[bd.brokerName] = dict(bd.brokerAddrs)
        return route

    async def refresh_routes(self) -> None:
        topics = set(self.publish) | {t for c in list(self.consumers.values()) for t in c.topics()}
        for t in topics:
            try:
                await self.fetch_route(t)
            except ShmqError as e:
                log.debug("route of %s not refreshed: %s", t, e)

    async def publish_info(self, topic: str, default_topic: str | None = TBW102,
                           default_queue_nums: int = 4) -> TopicPublishInfo:
        info = self.publish.get(topic)
        if info is not None and info.queues:
            return info
        route = await self.fetch_route(topic)
        if route is not None:
            info = self.publish[topic]
            if info.queues:
                return info
        if default_topic:
            # RocketMQ's auto-creation: send through the brokers that hold the default topic
            base = await self.fetch_route(default_topic)
            if base is not None:
                info = publish_info(topic, base, max_queues=default_queue_nums, via_default=True)
                if info.queues:
                    return info
        raise TopicNotExist(ResponseCode.TOPIC_NOT_EXIST,
                            f"No route info of this topic: {topic}")

    async def subscribe_queues(self, topic: str):
        route = self.routes.get(topic) or await self.fetch_route(topic)
        if route is None:
            raise TopicNotExist(ResponseCode.TOPIC_NOT_EXIST, f"No route info of this topic: {topic}")
        return subscribe_queues(topic, route)

    def master_addr(self, broker_name: str) -> str | None:
        return self.broker_addrs.get(broker_name, {}).get(0)

    def any_addr(self, broker_name: str) -> str | None:
        """RocketMQ's findBrokerAddressInAdmin: the master, else any slave (offsets), skipping
        one that just refused a connection while another exists."""
        return self.read_addr(broker_name, 0)[0]

    def read_addr(self, broker_name: str, broker_id: int = 0) -> tuple[str | None, bool]:
        """RocketMQ's findBrokerAddressInSubscribe(brokerName, brokerId, false): the broker
        the last pull answer suggested (suggestWhichBrokerId), else another of the same name
        (a slave while the master is gone from the route or refuses connections); returns
        (address, is a slave)."""
        addrs = self.broker_addrs.get(broker_name, {})
        if not addrs:
            return None, False
        addr = addrs.get(broker_id)
        # the usual case; no clock read while no address was ever marked unreachable (a TCP
        # consumer asks once per pull, so once per message when caught up)
        unreachable = self._unreachable
        if addr is not None and (not unreachable or unreachable.get(addr, 0) <= time.monotonic()):
            return addr, broker_id != 0
        now = time.monotonic()
        order = [broker_id] + sorted(i for i in addrs if i != broker_id)
        live = [i for i in order if i in addrs and self._unreachable.get(addrs[i], 0) <= now]
        bid = (live or [i for i in order if i in addrs])[0]
        return addrs[bid], bid != 0

    # ---- heartbeats ------------------------------------------------------------------------
    def heartbeat_data(self) -> HeartbeatData:
        return HeartbeatData(
            clientID=self.client_id,
            producerDataSet=[ProducerData(groupName=g) for g in self.producers],
            consumerDataSet=[c.consumer_data() for c in self.consumers.values()],
        )

    async def heartbeat_all(self) -> None:
        body = encode_json(self.heartbeat_data())
        for name, addrs in list(self.broker_addrs.items()):
            for bid, addr in list(addrs.items()):
                if bid != 0 and not self.consumers:
                    continue
                try:
                    cmd = request(RequestCode.HEART_BEAT)
                    cmd.body = body
                    (await self.invoke(addr, cmd)).raise_for_code()
                except ShmqError as e:
                    log.debug("heartbeat to %s (%s) failed: %s", name, addr, e)

    async def learn_brokers(self, default_topic: str = TBW102) -> None:
        """What a Java producer does at start: the default topic's route names every broker
        that may auto-create topics; heartbeat to them now, so they know this client (a
        transaction check-back looks for a producer of the group among its channels)."""
        try:
            await self.fetch_route(default_topic)
        except ShmqError as e:
            log.debug("route of %s: %s", default_topic, e)
        await self.heartbeat_all()

    def heartbeat_now(self) -> None:
        self.call(self.heartbeat_all(), 10)

    # ---- broker -> client requests ----------------------------------------------------------
    async def _on_ids_changed(self, conn, cmd: RemotingCommand):
        group = cmd.ext_fields.get("consumerGroup")
        c = self.consumers.get(group)
        if c is not None:
            c.rebalance_soon()
        return None

    async def _on_reset_offset(self, conn, cmd: RemotingCommand):
        group = cmd.ext_fields.get("group")
        c = self.consumers.get(group)
        if c is not None and hasattr(c, "reset_offsets_from_broker"):
            await c.reset_offsets_from_broker(cmd)
        return cmd.make_response() if not cmd.is_oneway else None

    async def _on_running_info(self, conn, cmd: RemotingCommand):
        return cmd.make_response(body=b'{"properties":{},"subscriptionSet":[],"mqTable":{},"statusTable":{}}')

    async def _on_check_transaction(self, conn, cmd: RemotingCommand):
        # The broker asks a live producer of the half message's group; the group is in the
        # record's PGROUP property, so any transactional producer here may be asked.
        for p in list(self.producers.values()):
            if hasattr(p, "on_check_transaction"):
                await p.on_check_transaction(conn, cmd)
                break
        return None

    # ---- members ---------------------------------------------------------------------------
    def register_producer(self, group: str, producer) -> None:
        if group in self.producers and self.producers[group] is not producer:
            raise ShmqError(f"producer group {group} is already started in this process")
        self.producers[group] = producer

    def register_consumer(self, group: str, consumer) -> None:
        if group in self.consumers and self.consumers[group] is not consumer:
            raise ShmqError(f"consumer group {group} is already started in this process")
        self.consumers[group] = consumer

    async def _unregister(self, producer_group: str | None, consumer_group: str | None) -> None:
        for name, addrs in list(self.broker_addrs.items()):
            addr = addrs.get(0)
            if addr is None:
                continue
            kw = {"clientID": self.client_id}
            if producer_group:
                kw["producerGroup"] = producer_group
            if consumer_group:
                kw["consumerGroup"] = consumer_group
            try:
                await self.invoke(addr, request(RequestCode.UNREGISTER_CLIENT, **kw), 3.0)
            except ShmqError:
                pass

    def unregister(self, producer_group: str | None = None, consumer_group: str | None = None) -> None:
        if producer_group:
            self.producers.pop(producer_group, None)
        if consumer_group:
            self.consumers.pop(consumer_group, None)
        try:
            self.call(self._unregister(producer_group, consumer_group), 10)
        except Exception as e:
            log.debug("unregister failed: %s", e)

    def release(self) -> None:
        with self._registry_lock:
            self._refs -= 1
            if self._refs > 0:
                return
            self._closed = True
            for k, v in list(self._registry.items()):
                if v is self:
                    del self._registry[k]
        async def close_all():
            # every task of ours ends and every connection closes before the loop stops, so
            # nothing is left pending or half-open; a task still running (a rebalance a
            # broker's notification started) may open a new connection while the first ones
            # close, hence the rounds
            for svc in self._services:
                await svc.stop()
            me = asyncio.current_task()
            for _ in range(3):
                for c in list(self._clients.values()):
                    try:
                        await c.close()
                    except Exception as e:
                        log.debug("closing %s: %s", c.addr, e)
                tasks = [t for t in asyncio.all_tasks() if t is not me]
                if not tasks:
                    break
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        try:
            self.call(close_all(), 10)
        except Exception as e:
            log.debug("closing client instance: %s", e)
        self.oneway_lane.direct(None, None, 0)  # (and the cycle through its bound methods goes)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)
        if not self.loop.is_running():
            self.loop.close()


__all__ = ["ClientInstance"]
