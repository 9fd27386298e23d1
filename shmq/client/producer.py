"""Producer: sync, async, oneway, batch and ordered sends, over TCP or, for a broker on this
host, straight into its store (the local transport).

Retries follow RocketMQ: a sync send is tried up to 1 + retry_times_when_send_failed times,
each retry on another broker when there is one; an async send retries
retry_times_when_send_async_failed times on the same broker; oneway never retries. A send
answered FLUSH_DISK_TIMEOUT / SLAVE_NOT_AVAILABLE / FLUSH_SLAVE_TIMEOUT is stored but not
confirmed: it is returned with that status, not raised and not retried.
"""
from __future__ import annotations

import itertools
import logging
import threading
import time
import types
import zlib

from shmq.errors import (BrokerError, FlushDiskTimeout, InvalidMessage, MessageTooLarge,
                         RemotingError, ReplicationError, ShmqError, StaleSegment)
from shmq.message.names import TAGS, TBW102, TRAN_MSG
from shmq.message.properties import NAME_VALUE_SEP, PROPERTY_SEP, encode_properties
from shmq.native import ProducerBase
from shmq.protocol import RemotingCommand, RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import send_v2_ext
from shmq.protocol.acl_sign import credentials
from shmq.store import recall, validate
from shmq.store.put import PutRequest

from .async_lane import send_plain_async
from .instance import ClientInstance
from .local import LocalLinks
from .local_send import LocalSender
from .message import COMPRESS_LEVEL, COMPRESS_THRESHOLD, UNIQ_KEY, Message, MessageQueue, SendResult, SendStatus
from .oneway import lane_state, send_plain, targets_ahead
from .producer_batch import BatchSends, topic_sendable
from .remote_send import RETRY_CODES, STATUS_OF_CODE, AsyncSend, Frames, RemoteSend, send_result
from .route import TopicPublishInfo
from .send_future import SendFuture, done_future as _done
from .sync_send import exchange, plain, send_batch_steady, send_plain as send_plain_sync
from .uniq_id import new_uniq_id

log = logging.getLogger("shmq.client.producer")

# a plain message's properties text (Producer._wire): [TAGS \x01 tags \x02] UNIQ_KEY \x01 id
_UNIQ_HEAD = UNIQ_KEY + NAME_VALUE_SEP
_TAGS_HEAD, _TAGS_END = TAGS + NAME_VALUE_SEP, PROPERTY_SEP + _UNIQ_HEAD


class Producer(ProducerBase, BatchSends):
    """``send``, ``send_batch`` and ``send_async`` are C (``ProducerBase``,
    shmq/native/hot_producer.c): the local C send (``_hot`` / ``_hot_batch``) or the plain TCP
    async send (``_hot_async``, native/async_plain.c) first, then ``_send`` / ``_send_batch`` /
    ``_send_async`` below for everything it does not take (the batch steps: ``BatchSends``,
    client/producer_batch.py)."""

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, local: str = "auto",
                 send_timeout: float = 3.0, retry_times_when_send_failed: int = 2,
                 retry_times_when_send_async_failed: int = 2, compress_msg_body_over: int = COMPRESS_THRESHOLD,
                 max_message_size: int = 4 * 1024 * 1024, send_latency_fault_enable: bool = False,
                 default_topic_queue_nums: int = 4, create_topic_key: str = TBW102,
                 access_key: str | None = None, secret_key: str | None = None, security_token: str | None = None,
                 sync_spin_us: float = 0):
        if not group:
            raise ValueError("a producer group is required")
        self.group = group
        self.namesrv = namesrv
        self.local_mode = local
        self.send_timeout = send_timeout
        self.retry_times = retry_times_when_send_failed
        self.retry_times_async = retry_times_when_send_async_failed
        self.compress_over = compress_msg_body_over
        self.max_message_size = max_message_size
        self.latency_fault = send_latency_fault_enable
        self.default_queue_nums = default_topic_queue_nums
        self.create_topic_key = create_topic_key
        self.credentials = credentials(access_key, secret_key, security_token)
        #: a sync send over TCP polls for its answer this long before it blocks (SyncRemotingClient)
        self.sync_spin_us = sync_spin_us
        self.instance: ClientInstance | None = None
        self.links: LocalLinks | None = None
        self._rr = itertools.count()
        self._unavailable: dict[str, float] = {}  # broker name -> monotonic time it is usable again
        self._tls = threading.local()               # per-thread sync connections
        self._all_conns: list = []
        self._conns_lock = threading.Lock()
        self._fast = LocalSender(self) if local != "never" else None
        # the common local send() whole in C (LocalSender.hot: None when it does not take one)
        # (a producer that never sends locally: a plain message's TCP send, client/sync_send.py)
        self._hot = self._fast.hot if self._fast is not None else types.MethodType(send_plain_sync, self)
        self._hot_batch = (self._fast.hot.batch if self._fast is not None
                           else types.MethodType(send_batch_steady, self))
        self._frames = Frames(group)
        # topic -> its route and batch templates (sync_send.send_batch_plain); made anew, as the
        # LaneState is, whenever an attribute of the producer is set (__setattr__)
        self._batch_routes: dict = {}
        self._sendable: set[str] = set()  # topics _prepare checked (_wire)

    def __setattr__(self, name: str, value) -> None:
        # every setting a plain send reads is copied into its LaneState (client/oneway.py):
        # whatever is set, it is made again from the producer as it is now
        object.__setattr__(self, name, value)
        # (and with it the C send_async's plan, ProducerBase._hot_async: oneway.lane_state; and
        # the batch templates send_batch_plain caches, made with create_topic_key and the rest)
        if name != "_lane_state" and name != "_hot_async" and name != "_batch_routes":
            object.__setattr__(self, "_lane_state", None)
            object.__setattr__(self, "_hot_async", None)
            object.__setattr__(self, "_batch_routes", {})

    @property
    def compress_over(self) -> int:
        """compressMsgBodyOverHowmuch: bodies above it are compressed (the local C send takes
        only bodies up to it, so a change is handed to it too)."""
        return self._compress_over

    @compress_over.setter
    def compress_over(self, limit: int) -> None:
        self._compress_over = limit
        if getattr(self, "_fast", None) is not None:
            self._fast.hot.limit = limit

    # ---- life ------------------------------------------------------------------------------
    def start(self) -> "Producer":
        if self.instance is not None:
            return self
        self.instance = ClientInstance.acquire(self.namesrv, producer_group=self.group, credentials=self.credentials)
        self.instance.register_producer(self.group, self)
        self.links = LocalLinks(self.instance, self.local_mode)
        self._learning = self.instance.call_soon(self.instance.learn_brokers(self.create_topic_key))
        return self

    def shutdown(self) -> None:
        inst, self.instance = self.instance, None
        if inst is None:
            return
        if self.links:
            self.links.close()
        with self._conns_lock:
            conns, self._all_conns = self._all_conns, []
        for c in conns:
            c.close()
        inst.unregister(producer_group=self.group)
        inst.release()

    def __enter__(self) -> "Producer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    def _inst(self) -> ClientInstance:
        if self.instance is None:
            raise ShmqError("the producer is not started (call start() or use it as a context manager)")
        return self.instance

    # ---- preparing a message ---------------------------------------------------------------
    def _prepare(self, msg: Message, *, compress: bool = True) -> tuple[bytes, dict, int]:
        validate.check_sendable_topic(msg.topic)
        if not msg.body:
            raise InvalidMessage("the message body length is zero")
        if len(msg.body) > self.max_message_size:
            raise MessageTooLarge(len(msg.body), self.max_message_size)
        msg.check_text()
        props = msg.wire_properties()
        props.setdefault(UNIQ_KEY, new_uniq_id())
        body, sysflag = msg.body, 0
        if props.get(TRAN_MSG) == "true":
            sysflag |= 0x4  # TRANSACTION_PREPARED_TYPE, as the Java client marks half messages
        if compress and len(body) > self.compress_over:
            body = zlib.compress(body, COMPRESS_LEVEL)
            sysflag |= 0x1  # compressed, zlib (type bits 0: what older clients send)
        return body, props, sysflag

    def _publish_info(self, topic: str) -> TopicPublishInfo:
        inst = self._inst()
        info = inst.publish.get(topic)
        if info is not None and info.queues:
            return info
        known = set(inst.broker_addrs)
        info = inst.call(inst.publish_info(topic, self.create_topic_key, self.default_queue_nums),
                         self.send_timeout + 1)
        if set(inst.broker_addrs) - known:
            # a broker we had not met: tell it about this producer now, not in 30 s (the
            # transaction check-back looks for a producer of the group among its channels)
            inst.call(inst.heartbeat_all(), self.send_timeout + 1)
        if self._fast is not None:
            self._fast.learn(topic, info)  # a local topic's writers and queue files, made now
        self._route_arrived(topic, info)
        return info

    def _route_arrived(self, topic: str, info: TopicPublishInfo) -> None:
        """What a plain send to ``topic`` checks and makes once per topic, done when its route
        arrives (the first send waits for that fetch anyway), not by the topic's first send: the
        name checked as ``_prepare`` checks it (a topic that fails stays out of ``_sendable``, so
        its first send takes ``_prepare`` and raises its precise error, as before), and, for a
        producer whose plain sends take the C sync / lane path, its queues' frame templates
        (oneway.targets_ahead). Without it a new topic's first sync send took the Python
        path (``_wire``, ``_prepare``, a RemoteSend, ``_invoke_sync``) and its second made every
        queue's templates: issue 16, each ~0.2-0.3 ms of the producer's CPU."""
        if not topic_sendable(topic):
            return
        self._remember_sendable(topic)
        targets_ahead(self, lane_state(self), topic, info)

    def _remember_sendable(self, topic: str) -> None:
        """``topic`` passed ``_prepare``'s topic check: kept in ``_sendable``, the bounded cache
        of checked topics the plain sends' C paths ask (``_wire``, a batch, a route's arrival)."""
        sendable = self._sendable
        if topic not in sendable:
            if len(sendable) >= 4096:
                sendable.clear()
            sendable.add(topic)

    def _select(self, info: TopicPublishInfo, avoid: str | None) -> MessageQueue:
        queues = info.queues
        n = len(queues)
        start = next(self._rr)
        if avoid is None and not self.latency_fault:
            return queues[start % n]  # what the loop below answers then, without it
        now = time.monotonic()
        for i in range(n):
            mq = queues[(start + i) % n]
            if mq.broker_name == avoid and n > 1 and any(q.broker_name != avoid for q in queues):
                continue
            if self.latency_fault and self._unavailable.get(mq.broker_name, 0) > now:
                continue
            return mq
        return queues[start % n]

    def _mark_failed(self, broker: str) -> None:
        if self.latency_fault:
            self._unavailable[broker] = time.monotonic() + 30.0

    # ---- sync send -------------------------------------------------------------------------
    def _send(self, msg: Message, timeout: float | None = None) -> SendResult:
        """``send``: one message, answered when stored (and flushed or replicated as the broker's
        mode requires); a local send the C step (``_hot``) did not take comes here too."""
        if self._fast is not None:
            r = self._fast.send(msg)
            if r is not None:
                return r
        wire = None if plain(self, msg) else self._wire(msg)  # None: built in C (client/sync_send.py)
        info = self._publish_info(msg.topic)
        return self._tries(msg, wire, info, time.monotonic() + (timeout or self.send_timeout), timeout)

    def _tries(self, msg: Message, wire: tuple | None, info: TopicPublishInfo, deadline: float,
               timeout: float | None, mq: MessageQueue | None = None, failed: Exception | None = None) -> SendResult:
        """``_send``'s tries, each to the next queue (avoiding the broker that failed last).
        ``mq``: the first try's queue, already drawn (client/sync_send.send_plain); with
        ``failed``, that try was made and raised it."""
        last: Exception | None = None
        avoid = None
        first = 0
        if failed is not None:
            last, avoid, mq, first = self._failed(failed, mq, 0), mq.broker_name, None, 1
        for attempt in range(first, 1 + self.retry_times):
            if time.monotonic() >= deadline:
                break
            if mq is None:
                mq = self._select(info, avoid)
            try:
                return self._send_one(mq, msg, wire, info, deadline)
            except (RemotingError, BrokerError, StaleSegment) as e:
                last, avoid, mq = self._failed(e, mq, attempt), mq.broker_name, None
        raise last if last else ShmqError(f"send timed out after {timeout or self.send_timeout}s")

    def _failed(self, e: Exception, mq: MessageQueue, attempt: int) -> Exception:
        """A try to ``mq`` raised ``e``: raised on when it is not retried, else noted."""
        if isinstance(e, BrokerError) and e.code not in RETRY_CODES:
            raise e
        self._mark_failed(mq.broker_name)
        log.debug("send to %s failed (attempt %d): %s", mq, attempt + 1, e)
        return e

    def send_orderly(self, msg: Message, selector, arg=None, timeout: float | None = None) -> SendResult:
        """Send to the queue ``selector(queues, msg, arg)`` picks (same arg, same queue)."""
        wire = None if plain(self, msg) else self._wire(msg)
        info = self._publish_info(msg.topic)
        mq = selector(list(info.queues), msg, arg)
        if not isinstance(mq, MessageQueue):
            raise ShmqError("the selector must return one of the queues it was given")
        return self._send_one(mq, msg, wire, info, time.monotonic() + (timeout or self.send_timeout))

    def send_to_queue(self, msg: Message, mq: MessageQueue, timeout: float | None = None) -> SendResult:
        wire = None if plain(self, msg) else self._wire(msg)
        info = self._publish_info(msg.topic)
        return self._send_one(mq, msg, wire, info, time.monotonic() + (timeout or self.send_timeout))

    def _send_one(self, mq: MessageQueue, msg: Message, wire: tuple | None, info: TopicPublishInfo,
                  deadline: float) -> SendResult:
        """One try of a sync send of ``msg`` (``wire``: its ``_wire``, or None for a plain message,
        whose frame the C sync send builds) to ``mq``."""
        link = None if info.via_default else self.links.get(mq.broker_name)
        if link is not None:
            return self._send_local(link, mq, msg, *self._prepare(msg), info)
        inst = self._inst()
        addr = inst.master_addr(mq.broker_name)
        if addr is None:
            raise RemotingError(f"no address for broker {mq.broker_name}")
        if wire is None:
            r = exchange(self, addr, mq, False, msg.flag, msg.tags or None, msg.body, None,
                         max(0.001, deadline - time.monotonic()))
            if r is not None:
                return r
            wire = self._wire(msg)
        body, text, sysflag, uniq = wire
        req = self._remote(mq, msg.flag, body, text, sysflag, batch=False, oneway=False)
        resp = self._invoke_sync(addr, req, max(0.001, deadline - time.monotonic()))
        return self._send_result(resp, mq, uniq)

    def _invoke_sync(self, addr: str, cmd, timeout: float):
        """A sync send waits on a blocking socket of its own thread: handing the request to the
        client's event loop thread and back costs more than the broker's whole answer (a
        self-pipe write, two thread switches). Async sends and consumers use the loop."""
        c = self._sync_conn(addr)
        try:
            return c.invoke(cmd, timeout)
        except RemotingError:
            self._drop_sync(addr, c)
            raise

    def _drop_sync(self, addr: str, c: SyncRemotingClient) -> None:
        """A timed-out or broken sync connection is closed and not reused."""
        self._tls.conns.pop(addr, None)
        c.close()

    def _sync_conn(self, addr: str) -> SyncRemotingClient:
        conns = getattr(self._tls, "conns", None)
        if conns is None:
            conns = self._tls.conns = {}
        c = conns.get(addr)
        if c is None:
            c = conns[addr] = SyncRemotingClient(addr, timeout=self.send_timeout, rpc_hook=self.instance.rpc_hook,
                                                      spin_us=self.sync_spin_us)
            with self._conns_lock:
                self._all_conns.append(c)
        return c

    def _send_request(self, mq, msg, body, props, sysflag, *, batch: bool) -> RemotingCommand:
        """SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE as a RemotingCommand (protocol.headers.send_v2_ext
        builds the fields): the generic encoding, which the sends' template frames (``_remote``)
        are checked against (tests/unit/test_send_frame.py) and the benchmarks' peer rows use."""
        ext = send_v2_ext(self.group, mq.topic, self.create_topic_key, self.default_queue_nums, mq.queue_id,
                          sysflag, int(time.time() * 1000), msg.flag, encode_properties(props), batch)
        return RemotingCommand(code=RequestCode.SEND_BATCH_MESSAGE if batch else RequestCode.SEND_MESSAGE_V2,
                               ext_fields=ext, body=body)

    def _remote(self, mq, flag: int, body: bytes, properties: str, sysflag: int, *, batch: bool,
                oneway: bool) -> RemoteSend:
        """The request of an async or oneway send, its frame made on its connection (remote_send)."""
        return RemoteSend(self._frames.get(mq, self.create_topic_key, self.default_queue_nums, batch, oneway),
                          sysflag, int(time.time() * 1000), flag, properties, body)

    def _wire(self, msg: Message) -> tuple[bytes, str, int, str]:
        """(body, properties text, sysflag, UNIQ_KEY) of a message to send over TCP. A plain one
        (this class, no keys, properties or delay, a body sent as is, tags without separators,
        a topic that passed _prepare's check before) is built here without a dict: what
        _prepare + encode_properties make of it (TAGS, then UNIQ_KEY); any other takes _prepare,
        which raises the precise error."""
        body = msg.body
        topic = msg.topic
        if (msg.__class__ is Message and topic.__class__ is str and topic in self._sendable and not msg.keys
                and not msg.delay_level and body.__class__ is bytes and 0 < len(body) <= self.compress_over
                and len(body) <= self.max_message_size and not msg.properties):
            tags = msg.tags
            if not tags:
                uniq = new_uniq_id()
                return body, _UNIQ_HEAD + uniq, 0, uniq
            if tags.__class__ is str and "\x01" not in tags and "\x02" not in tags:
                uniq = new_uniq_id()
                return body, _TAGS_HEAD + tags + _TAGS_END + uniq, 0, uniq
        body, props, sysflag = self._prepare(msg)
        self._remember_sendable(msg.topic)
        return body, encode_properties(props), sysflag, props.get(UNIQ_KEY)

    _send_result = staticmethod(send_result)

    def _send_local(self, link, mq, msg, body, props, sysflag, info, *, batch_ids: str | None = None) -> SendResult:
        batch = batch_ids is not None
        req = PutRequest(topic=mq.topic, body=body, properties=encode_properties(props), queue_id=mq.queue_id,
                         flag=msg.flag if msg is not None else 0, sysflag=sysflag,
                         born_host=(self._inst().client_ip, 0), producer_group=self.group, batch=batch,
                         write_queues=sum(1 for q in info.queues if q.broker_name == mq.broker_name))
        status = SendStatus.SEND_OK
        try:
            with link.lock:
                pr = link.pipeline.put(req)
        except StaleSegment:
            self.links.invalidate(mq.broker_name)  # the broker restarted: re-attach next time
            raise
        except FlushDiskTimeout as e:
            pr, status = e.result, SendStatus.FLUSH_DISK_TIMEOUT
        except ReplicationError as e:  # SYNC_MASTER, no slave confirmed: a status, as on TCP
            pr, status = e.result, STATUS_OF_CODE[e.code]
        uniq = batch_ids if batch else props.get(UNIQ_KEY)
        handle = None
        if pr.deliver_ms and uniq and not batch:  # as the broker answers a timer send (recallHandle)
            handle = recall.build_handle(mq.topic, mq.broker_name, pr.deliver_ms + 1, uniq)
        return SendResult(status, uniq or pr.msg_id, pr.msg_id,
                          MessageQueue(mq.topic, mq.broker_name, pr.request_queue_id), pr.queue_offset,
                          recall_handle=handle)

    # ---- recall (RocketMQ 5.3 RECALL_MESSAGE) ------------------------------------------------
    def recall(self, topic: str, handle) -> str:
        """Cancel a timer message before it is due. ``handle`` is its SendResult (or that
        result's ``recall_handle``). Returns the recalled message's id; raises BrokerError
        (ILLEGAL_OPERATION, 604) when the handle is bad or its time has passed."""
        if isinstance(handle, SendResult):
            handle = handle.recall_handle
        if not handle:
            raise ValueError("no recall handle: only a timer message sent to its own topic has one")
        _topic, broker, _ts, _id = recall.decode_handle(handle)
        link = self.links.get(broker)
        if link is not None:
            try:
                with link.lock:
                    return recall.recall(link.pipeline, topic, handle, broker, self.group)
            except ShmqError as e:
                if isinstance(e, BrokerError) or not e.code:
                    raise
                raise BrokerError(e.code, str(e)) from None
        inst = self._inst()
        self._publish_info(topic)
        addr = inst.master_addr(broker)
        if addr is None:
            raise RemotingError(f"no address for broker {broker}")
        resp = self._invoke_sync(addr, request(RequestCode.RECALL_MESSAGE, topic=topic, recallHandle=handle,
                                               producerGroup=self.group), self.send_timeout)
        if resp.code != 0:
            raise BrokerError(resp.code, resp.remark)
        return resp.ext_fields.get("msgId", _id)

    # ---- async and oneway ------------------------------------------------------------------
    def _send_async(self, msg: Message, callback=None, timeout: float | None = None) -> SendFuture:
        """``send_async`` (ProducerBase's C method: its plain case first, ``_hot_async``, then
        this): a SendFuture (send_future.py: the methods of a concurrent.futures.Future, without
        its locks) of the SendResult; ``callback(result_or_exception)`` (RocketMQ's SendCallback)
        runs once when it is done, on the client's loop thread for a broker's answer."""
        try:
            send = send_plain_async(self, msg, callback, timeout)  # a plain one: one C call (async_lane.py)
            if send is not None:
                return send
            body, text, sysflag, uniq = self._wire(msg)
            info = self._publish_info(msg.topic)
            mq = self._select(info, None)
            link = None if info.via_default else self.links.get(mq.broker_name)
            if link is not None:
                return _done(callback, self._send_local(link, mq, msg, *self._prepare(msg), info))
            req = self._remote(mq, msg.flag, body, text, sysflag, batch=False, oneway=False)
        except Exception as e:
            return _done(callback, e)
        send = AsyncSend(self, callback, mq, req, uniq, timeout or self.send_timeout)
        try:
            send.submit()
        except Exception as e:  # noqa: BLE001 - not handed over (the producer shut down): nothing sent
            if not send.done():
                send._fail(e)
        return send

    def _async_local(self, link, mq: MessageQueue, msg: Message, info: TopicPublishInfo, callback) -> SendFuture:
        """An async send to a broker whose store is mapped here: done at once."""
        return _done(callback, self._send_local(link, mq, msg, *self._prepare(msg), info))

    def _send_oneway(self, msg: Message) -> None:  # (ProducerBase.send_oneway's C step first)
        if send_plain(self, msg):  # a plain message: its frame written in C (client/oneway.py)
            return
        body, text, sysflag, _ = self._wire(msg)
        info = self._publish_info(msg.topic)
        mq = self._select(info, None)
        link = None if info.via_default else self.links.get(mq.broker_name)
        if link is not None:
            self._oneway_local(link, mq, msg, info)
            return
        inst = self._inst()
        addr = inst.master_addr(mq.broker_name)
        if addr is None:
            return
        # written by the client's loop thread with every other request submitted before it gets
        # to them: one system call for a burst, not one per message (the caller waits only when
        # the connection does not take more: ClientInstance.submit_oneway); a broken connection
        # is not reported, as the caller asked not to hear (the next send reconnects)
        inst.submit_oneway(addr, self._remote(mq, msg.flag, body, text, sysflag, batch=False, oneway=True),
                           self.send_timeout)

    def _oneway_local(self, link, mq: MessageQueue, msg: Message, info: TopicPublishInfo) -> None:
        try:
            self._send_local(link, mq, msg, *self._prepare(msg), info)
        except ShmqError as e:  # oneway: the caller asked not to hear about it
            log.debug("oneway send failed: %s", e)
