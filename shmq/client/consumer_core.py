"""What push and lite-pull consumers share: subscriptions, rebalance, process queues, the pull
loops (over TCP a long-polling chain of pulls per queue, client/tcp_pull.py; one thread reading
the mapped store and sleeping on its futex for queues of a local broker) and offsets.

Subclasses implement ``_deliver(pq, msgs)`` (hand messages to the user) and may override
``_queue_added`` / ``_queue_removed`` (orderly consumers lock queues on the broker).
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time

from shmq.errors import ShmqError
from shmq.message.javahash import java_string_hash
from shmq.message.names import RETRY_PREFIX, retry_topic
from shmq.protocol import RequestCode, request
from shmq.protocol.acl_sign import credentials
from shmq.protocol.bodies import ConsumerData, ConsumerListBody, SubscriptionData, decode_json
from shmq.native import ffi
from shmq.store import GetStatus

from .instance import ClientInstance
from .local import LocalLinks
from .local_pull import LocalPuller
from .message import MessageExt, MessageQueue, MessageSelector, message_from_view
from .offset_store import LocalFileOffsetStore, RemoteOffsetStore
from .rebalance import allocate_averagely
from .tcp_pull import PULL_DELAY_ON_ERROR_S, TcpPull

log = logging.getLogger("shmq.client.consumer")

CONSUME_FROM = {"LAST_OFFSET": "CONSUME_FROM_LAST_OFFSET", "FIRST_OFFSET": "CONSUME_FROM_FIRST_OFFSET",
                "TIMESTAMP": "CONSUME_FROM_TIMESTAMP"}


class ProcessQueue:
    """The messages of one assigned queue between pull and consume, and the offset that is safe
    to commit: the smallest offset still in flight, or one past everything seen (RocketMQ's
    ProcessQueue keeps a TreeMap of offsets for the same answer).

    A pulled batch above everything seen whose offsets are contiguous (every puller hands a
    queue's messages in queue order; the C record walk's batches are contiguous) is kept as ONE
    entry, ``_spans[first offset] = the batch``: a consumer that settles the batch it was handed
    (the concurrent and inline paths) removes it with one dict operation, not one per message.
    Anything else (a filtered pull with gaps, a batch put below what was seen, a partial removal
    when some messages go round again, an orderly consumer's ``first(n)``) first splits every
    span into per-message entries (``_single``; each message is split at most once), and is then
    answered exactly as with one entry per message. A span's offsets are never shared with any
    other entry (it starts above ``max_seen`` when put; a later per-message put splits it first),
    which is what lets a removal move ``_low`` past a whole span at once."""

    def __init__(self, mq: MessageQueue, next_offset: int):
        self.mq = mq
        self.next_offset = next_offset
        self._spans: dict[int, list[MessageExt]] = {}
        self._single: dict[int, MessageExt] = {}
        self.count = 0                         # messages in flight (in both); a plain attribute, read per wake-up
        self._low = next_offset                # <= the smallest offset in flight (when any)
        self._gone: dict[int, int] = {}        # spans removed above _low: first offset -> one past the last
        self.watch = None                      # local pulls: (store, pointer to the queue's max offset, QueueReader)
        self.max_seen = next_offset - 1
        self.lock = threading.Lock()
        self.consume_lock = threading.Lock()  # orderly: one consuming thread per queue
        self.dropped = False
        self.locked = False                    # orderly: holds the broker's queue lock
        self.lock_until = 0.0

    def put(self, msgs: list[MessageExt]) -> None:
        if not msgs:
            return
        n, lo, hi = len(msgs), msgs[0].queue_offset, msgs[-1].queue_offset
        # acquire / release, not ``with`` (see ``consumed``): a TCP consumer puts once per message
        lock = self.lock
        lock.acquire()
        try:
            if lo > self.max_seen and hi - lo == n - 1:
                if not self.count:
                    self._low = lo
                self._spans[lo] = msgs
                self.count += n
                self.max_seen = hi
                return
            self._split()
            self._gone.clear()  # offsets put again inside a removed span: walk them one by one
            d = self._single
            was_empty = not d
            low = high = lo
            for m in msgs:  # one pass: the lowest and highest offsets, and the map
                o = m.queue_offset
                d[o] = m
                if o < low:
                    low = o
                elif o > high:
                    high = o
            self.count = len(d)
            self._low = low if was_empty else min(low, self._low)
            if high > self.max_seen:
                self.max_seen = high
        finally:
            lock.release()

    def _split(self) -> None:
        """Every span into per-message entries (the lock is held)."""
        if self._spans:
            d = self._single
            for batch in self._spans.values():
                for m in batch:
                    d[m.queue_offset] = m
            self._spans.clear()

    def remove(self, msgs: list[MessageExt]) -> int:
        """Forget consumed messages; returns the offset safe to commit (the smallest still in
        flight, or one past everything seen)."""
        lock = self.lock  # acquire / release: see put
        lock.acquire()
        try:
            spans = self._spans
            lo = msgs[0].queue_offset if msgs else None
            if lo is not None and spans.get(lo) is msgs:  # the batch as put: one entry
                del spans[lo]
                count = self.count = self.count - len(msgs)
                if not count:
                    # nothing in flight (a caught-up consumer's every batch): _safe's first
                    # case, inline; _low is set again by the next put, as it is at count 0
                    if self._gone:
                        self._gone.clear()
                    return self.max_seen + 1
                hi = msgs[-1].queue_offset + 1
                if lo == self._low:
                    self._low = hi
                else:
                    self._gone[lo] = hi
            else:
                self._split()
                d = self._single
                for m in msgs:
                    d.pop(m.queue_offset, None)
                self.count = len(d)
            return self._safe()
        finally:
            lock.release()

    def consumed(self, first: int, last: int) -> int:
        """A batch consumed by the thread that pulled it before it was ever put (the inline
        push consumer, consume_threads=0): offsets first..last, contiguous and above everything
        seen (the caller checked both before the listener ran, and only that thread moves
        ``max_seen`` of a local queue). While it was consumed it was not in flight, which is
        safe: nothing above ``max_seen`` can be committed. Now it is passed like a removed
        span; returns the offset safe to commit, as ``remove`` does.

        With nothing in flight (``count`` 0, as this thread reads it) no other thread touches
        the queue's spans: only the pulling thread puts into a local queue, and the others only
        remove what is in flight (a remove that took the count to 0 has passed it, and answers
        the old or the new ``max_seen``: both safe, the batch was consumed). That case, a
        caught-up consumer's every wake-up, takes no lock, as ``_pull_local_once`` moves
        ``max_seen`` at count 0; an acquire is ~450 instructions on 3.11 (its argument parsing).
        Otherwise the lock is taken with acquire / release, not ``with``: CPython 3.11 looks up
        and binds ``__enter__`` and ``__exit__`` at every with statement (~900 instructions)."""
        if not self.count:  # nothing in flight, so _gone is empty (_safe empties it at 0)
            self.max_seen = last
            return last + 1
        lock = self.lock
        lock.acquire()
        try:
            self.max_seen = last
            if not self.count:  # the last in-flight batch was removed meanwhile
                return last + 1
            self._gone[first] = last + 1
            return self._safe()
        finally:
            lock.release()

    def _safe(self) -> int:
        """The offset safe to commit (the lock is held)."""
        if not self.count:
            self._gone.clear()
            return self.max_seen + 1
        # _low <= every offset in flight, and it only moves up: amortised O(1) per offset,
        # and a removed span is passed in one step. (Not next(iter(d)): after many pops
        # from its front a dict walks every deleted slot to find the first live one.)
        low, d, spans, gone = self._low, self._single, self._spans, self._gone
        while low not in d and low not in spans:
            low = gone.pop(low, low + 1)
        self._low = low
        return low

    def first(self, n: int) -> list[MessageExt]:
        with self.lock:
            self._split()
            return [self._single[k] for k in sorted(self._single)[:n]]


class ConsumerCore:
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, model: str = "CLUSTERING",
                 local: str = "auto", consume_from: str = "LAST_OFFSET", consume_timestamp: int | None = None,
                 pull_batch_size: int = 32, pull_threshold_for_queue: int = 1000,
                 rebalance_interval: float = 20.0, persist_interval: float = 5.0,
                 suspend_timeout_ms: int = 15000, offset_store_dir: str | None = None,
                 spin_s: float = 0.00005, idle_wait_s: float = 0.5,
                 access_key: str | None = None, secret_key: str | None = None, security_token: str | None = None):
        if model not in ("CLUSTERING", "BROADCASTING"):
            raise ValueError("model must be CLUSTERING or BROADCASTING")
        if consume_from not in CONSUME_FROM:
            raise ValueError(f"consume_from must be one of {', '.join(CONSUME_FROM)}")
        self.group = group
        self.namesrv = namesrv
        self.credentials = credentials(access_key, secret_key, security_token)
        self.model = model
        self.local_mode = local
        self.consume_from = consume_from
        self.consume_timestamp = consume_timestamp if consume_timestamp is not None else int(time.time() * 1000) - 30 * 60_000
        self.pull_batch_size = pull_batch_size
        self.threshold = pull_threshold_for_queue
        self.rebalance_interval = rebalance_interval
        self.persist_interval = persist_interval
        self.suspend_timeout_ms = suspend_timeout_ms
        self.offset_store_dir = offset_store_dir
        self.spin_s = spin_s
        self.idle_wait_s = idle_wait_s
        self._room = threading.Event()   # a local pull thread held back by flow control waits here
        self._throttled = False
        self.subscriptions: dict[str, SubscriptionData] = {}
        self._filters: dict[str, tuple[set | None, set | None]] = {}  # topic -> (tag texts, tag codes)
        self._local_plain: dict[str, bool] = {}
        self.pqs: dict[MessageQueue, ProcessQueue] = {}
        self.instance: ClientInstance | None = None
        self.offsets = None
        self.links: LocalLinks | None = None
        self._tasks: dict[MessageQueue, object] = {}
        self._pull_from: dict[MessageQueue, int] = {}  # brokerId each queue's last pull answer suggested
        self._local_threads: dict[str, threading.Thread] = {}
        self._local_poke = ffi.new("int32_t[1]")  # bumped when the local queue set changes (local_pull.py)
        # what the local pull thread does with a queue's new messages: put them in its
        # ProcessQueue and deliver them (a push consumer with consume_threads=0 sets its
        # listener's call here, which puts them only when it must: ProcessQueue.consumed)
        self._local_deliver = self._put_deliver
        # the local pull thread's spin keeps the GIL (native/hot_wait.c wait_read): only when that
        # thread runs the listener itself, so no consume thread of ours waits on its spin
        self._spin_keeps_gil = False
        self._gated = False  # whether _may_pull can answer False (an orderly consumer's locks)
        self._running = False
        self._rebalance_lock: asyncio.Lock | None = None
        self._bg = []

    # ---- subscriptions ----------------------------------------------------------------------
    def subscribe(self, topic: str, expression="*") -> None:
        sel = expression if isinstance(expression, MessageSelector) else MessageSelector.tags(expression or "*")
        sub = SubscriptionData(topic=topic, subString=sel.expression, subVersion=int(time.time() * 1000),
                               expressionType=sel.expression_type)
        texts = codes = None
        if sel.expression_type == "SQL92":
            from shmq.message.sql_filter import compile_cached
            compile_cached(sel.expression)  # a malformed expression fails here, at subscribe time
        elif sel.expression_type == "TAG" and sel.expression.strip() not in ("", "*"):
            texts = {t.strip() for t in sel.expression.split("||") if t.strip()}
            codes = {java_string_hash(t) for t in texts}
            sub.tagsSet = sorted(texts)
            sub.codeSet = sorted(codes)
        self.subscriptions[topic] = sub
        self._filters[topic] = (texts, codes)
        # local reads of this topic may take the C record walk: no filter, not a retry topic
        self._local_plain[topic] = codes is None and sel.expression_type != "SQL92" and not topic.startswith(RETRY_PREFIX)

    def topics(self) -> set[str]:
        return set(self.subscriptions)

    def consumer_data(self) -> ConsumerData:
        return ConsumerData(groupName=self.group, consumeType=self.consume_type,
                            messageModel=self.model, consumeFromWhere=CONSUME_FROM[self.consume_from],
                            subscriptionDataSet=list(self.subscriptions.values()))

    consume_type = "CONSUME_PASSIVELY"

    # ---- life ---------------------------------------------------------------------------
    def start(self):
        if self._running:
            return self
        if not self.subscriptions:
            raise ShmqError("subscribe to at least one topic before start()")
        if self.model == "CLUSTERING" and self.consume_type == "CONSUME_PASSIVELY":
            self.subscribe(retry_topic(self.group), "*")  # push consumers get their retries back
        self.instance = ClientInstance.acquire(self.namesrv, consumer_group=self.group, credentials=self.credentials)
        self.instance.register_consumer(self.group, self)
        self._instance_ready()
        self.links = LocalLinks(self.instance, self.local_mode)
        self.offsets = (RemoteOffsetStore(self.instance, self.group) if self.model == "CLUSTERING"
                        else LocalFileOffsetStore(self.instance, self.group, self.offset_store_dir))
        self._running = True
        inst = self.instance
        for t in list(self.subscriptions):
            try:
                inst.call(inst.fetch_route(t), 10)
            except ShmqError as e:
                log.warning("no route for %s yet: %s", t, e)
        inst.heartbeat_now()
        inst.call(self.rebalance(), 30)
        self._bg = [inst.every(self.rebalance_interval, self.rebalance, f"rebalance-{self.group}"),
                    inst.every(self.persist_interval, self.persist_offsets, f"offsets-{self.group}")]
        return self

    async def _stop_bg(self) -> None:
        for svc in self._bg:
            await svc.stop()

    def shutdown(self) -> None:
        if not self._running:
            return
        self._running = False
        inst = self.instance
        try:
            inst.call(self._stop_bg(), 5)
        except Exception as e:
            log.debug("shutdown: stopping the periodic jobs: %s", e)
        for pq in list(self.pqs.values()):
            pq.dropped = True
        for th in list(self._local_threads.values()):
            th.join(5)
        self._stop_consuming()
        try:
            inst.call(self._shutdown_async(), 15)
        except Exception as e:
            log.debug("shutdown: %s", e)
        self.links.close()
        inst.unregister(consumer_group=self.group)
        inst.release()
        self.instance = None

    async def _shutdown_async(self) -> None:
        for t in list(self._tasks.values()):
            t.cancel()
        for pq in list(self.pqs.values()):
            await self._queue_removed(pq)
        await self.offsets.persist()

    def _instance_ready(self) -> None:
        """Called once ``self.instance`` exists, before the first rebalance."""

    def _stop_consuming(self) -> None:
        pass

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ---- rebalance ---------------------------------------------------------------------
    def rebalance_soon(self) -> None:
        if self._running and self.instance is not None:
            self.instance.call_soon(self.rebalance())

    async def _consumer_ids(self, topic: str) -> list[str]:
        inst = self.instance
        route = inst.routes.get(topic) or await inst.fetch_route(topic)
        if route is None:
            return []
        for bd in route.brokerDatas:
            addr = bd.brokerAddrs.get(0) or next(iter(bd.brokerAddrs.values()), None)
            if addr is None:
                continue
            resp = await inst.invoke(addr, request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=self.group))
            if resp.code == 0:
                return sorted(decode_json(resp.body, ConsumerListBody).consumerIdList)
        return []

    async def rebalance(self) -> None:
        if not self._running:
            return
        if self._rebalance_lock is None:
            self._rebalance_lock = asyncio.Lock()
        async with self._rebalance_lock:
            wanted: set[MessageQueue] = set()
            for topic in list(self.subscriptions):
                held = {m for m in self.pqs if m.topic == topic}
                try:
                    mqs = await self.instance.subscribe_queues(topic)
                except ShmqError:
                    wanted.update(held)   # no route just now (the broker is re-registering): keep ours
                    continue
                if self.model == "BROADCASTING":
                    wanted.update(mqs)
                    continue
                cids = await self._consumer_ids(topic)
                if self.instance.client_id not in cids:
                    # the broker has not seen our heartbeat (it restarted): keep what we have,
                    # as RocketMQ's rebalanceByTopic does with an empty list, and tell it now
                    # rather than at the next heartbeat period (30 s without queues otherwise)
                    wanted.update(held)
                    await self.instance.heartbeat_all()
                    continue
                wanted.update(allocate_averagely(mqs, cids, self.instance.client_id))
            for mq in [m for m in self.pqs if m not in wanted]:
                pq = self.pqs.pop(mq)
                pq.dropped = True
                task = self._tasks.pop(mq, None)
                if task is not None:
                    task.cancel()
                await self._queue_removed(pq)
                log.info("%s: released %s", self.group, mq)
            for mq in sorted(wanted - set(self.pqs)):
                try:
                    if not await self._queue_added(mq):
                        continue
                    start = await self._start_offset(mq)
                except ShmqError as e:
                    log.info("%s: cannot start %s yet: %s", self.group, mq, e)
                    continue
                pq = ProcessQueue(mq, start)
                self._prepare_pq(pq)
                self.pqs[mq] = pq
                log.info("%s: took %s from offset %d", self.group, mq, start)
                await self._start_pulling(pq)

    async def _queue_added(self, mq: MessageQueue) -> bool:
        return True

    def _prepare_pq(self, pq: ProcessQueue) -> None:
        pass

    async def _queue_removed(self, pq: ProcessQueue) -> None:
        await self.offsets.persist({pq.mq})
        self.offsets.remove(pq.mq)

    async def _start_offset(self, mq: MessageQueue) -> int:
        off = await self.offsets.read(mq)
        if off >= 0:
            return off
        if mq.topic.startswith(RETRY_PREFIX) or self.consume_from == "FIRST_OFFSET":
            return 0
        inst = self.instance
        addr = inst.any_addr(mq.broker_name)
        if self.consume_from == "LAST_OFFSET":
            resp = await inst.invoke(addr, request(RequestCode.GET_MAX_OFFSET, topic=mq.topic, queueId=mq.queue_id))
        else:
            resp = await inst.invoke(addr, request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic=mq.topic,
                                                   queueId=mq.queue_id, timestamp=self.consume_timestamp))
        resp.raise_for_code()
        return int(resp.ext_fields["offset"])

    # ---- offsets -------------------------------------------------------------------------
    async def move_to(self, mq: MessageQueue, offset: int) -> None:
        """Consume ``mq`` from ``offset`` on: the queue's messages in flight are dropped (their
        consumption is not committed) and pulling restarts there."""
        self.offsets.update(mq, offset, increase_only=False)
        pq = self.pqs.get(mq)
        if pq is None:
            return
        pq.dropped = True
        task = self._tasks.pop(mq, None)
        if task is not None:
            task.cancel()
        npq = ProcessQueue(mq, offset)
        self._prepare_pq(npq)
        self.pqs[mq] = npq
        await self._start_pulling(npq)

    async def reset_offsets_from_broker(self, cmd) -> None:
        """RESET_CONSUMER_CLIENT_OFFSET: an operator moved the group (shmq consumer
        reset-offset / mqadmin resetOffsetByTime); continue from the broker's offsets."""
        from shmq.protocol.bodies import decode_reset_offset_body
        table = decode_reset_offset_body(cmd.body)
        for (topic, broker, qid), off in table.items():
            await self.move_to(MessageQueue(topic, broker, qid), off)
        log.warning("%s: offsets reset by the broker for %d queues", self.group, len(table))
        await self.offsets.persist()

    def commit(self, pq: ProcessQueue, offset: int) -> None:
        # written out once more in PushConsumer._consume_inline (a frame less per wake-up)
        if not pq.dropped:
            self.offsets.update(pq.mq, offset)
        if self._throttled and pq.count < self.threshold:
            self._throttled = False
            self._room.set()

    async def persist_offsets(self) -> None:
        await self.offsets.persist()

    # ---- pulling -----------------------------------------------------------------------
    async def _start_pulling(self, pq: ProcessQueue) -> None:
        link = await self.links.aget(pq.mq.broker_name)
        if link is not None:
            self.local_changed()
            self._ensure_local_thread(pq.mq.broker_name)
        else:
            self._tasks[pq.mq] = asyncio.ensure_future(self._pull_tcp(pq))

    def _accept(self, topic: str, msgs: list[MessageExt]) -> list[MessageExt]:
        texts = self._filters.get(topic, (None, None))[0]
        if texts is None:
            return msgs
        return [m for m in msgs if m.tags in texts]

    async def _pull_tcp(self, pq: ProcessQueue) -> None:
        """The queue's TCP pulls: chains of pulls answered in callbacks (client/tcp_pull.py),
        each ending with the delay before the next (flow control, an error, a new broker)."""
        puller = TcpPull(self, pq)
        while self._running and not pq.dropped:
            try:
                delay = await puller.run()
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - the queue is pulled again, never left behind
                log.exception("%s: pulling %s failed", self.group, pq.mq)
                delay = PULL_DELAY_ON_ERROR_S
            if delay:
                await asyncio.sleep(delay)

    def _may_pull(self, pq: ProcessQueue) -> bool:
        return True

    def local_changed(self) -> None:
        """The queues read from a local store changed: the pull thread builds its set again
        at its next look (the next append, or its idle wait)."""
        self._local_poke[0] = (self._local_poke[0] + 1) & 0x7FFFFFFF

    def _ensure_local_thread(self, broker: str) -> None:
        th = self._local_threads.get(broker)
        if th is None or not th.is_alive():
            th = threading.Thread(target=LocalPuller(self, broker).run, name=f"shmq-local-pull-{broker}", daemon=True)
            self._local_threads[broker] = th
            th.start()

    def _pull_local_once(self, store, pq: ProcessQueue, reader=None) -> bool:
        mq = pq.mq
        if reader is not None and self._local_plain.get(mq.topic):
            # no filter, no retry topic: the C record walk (what get_messages answers FOUND for)
            msgs, nxt = reader.read(pq.next_offset, self.pull_batch_size)
            if msgs:
                pq.next_offset = nxt
                self._local_deliver(pq, msgs)
                return True
        codes = self._filters.get(mq.topic, (None, None))[1]
        sub = self.subscriptions.get(mq.topic)
        rec_filter = None
        if sub is not None and sub.expressionType == "SQL92":
            # evaluated on the store's records, as the broker does for TCP pulls
            from shmq.message.sql_filter import compile_cached
            rec_filter = compile_cached(sub.subString).matches_record
        res = store.get_messages(mq.topic, mq.queue_id, pq.next_offset, self.pull_batch_size, tag_codes=codes,
                                 record_filter=rec_filter)
        st = res.status
        if st is GetStatus.FOUND:
            msgs = [message_from_view(v, 0, mq.broker_name) for v in res.messages]
            msgs = self._accept(mq.topic, msgs)
            pq.next_offset = res.next_begin_offset
            if msgs:
                self._local_deliver(pq, msgs)
            return True
        if st is GetStatus.NO_MATCHED_MESSAGE:
            pq.next_offset = res.next_begin_offset
            if not pq.count:
                pq.max_seen = max(pq.max_seen, res.next_begin_offset - 1)
                self.commit(pq, res.next_begin_offset)
            return True
        if st in (GetStatus.OFFSET_TOO_SMALL, GetStatus.OFFSET_OVERFLOW_BADLY):
            pq.next_offset = res.next_begin_offset
            pq.max_seen = res.next_begin_offset - 1
            self.offsets.update(mq, res.next_begin_offset, increase_only=False)
            return True
        return False

    def _put_deliver(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        pq.put(msgs)
        self._deliver(pq, msgs)

    def _deliver(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        raise NotImplementedError

    def _steady_pool(self) -> tuple | None:
        """A TCP chain's hand-over in C (TcpPull._arm), or None: native/pull_steady.c calls _deliver."""
        return None

