"""PushConsumer: messages pulled in the background are handed to a listener on a pool of
consume threads.

Concurrently (orderly=False): any thread takes any batch; RECONSUME_LATER sends the messages
back to the broker (CONSUMER_SEND_MSG_BACK: %RETRY%<group>, delay level 3 + reconsume
times, %DLQ%<group> after max_reconsume_times), or re-delivers locally if that fails.
Orderly (orderly=True): a queue is consumed only while this client holds its lock on the
broker (LOCK_BATCH_MQ, renewed every 20 s, 60 s lease), and by one thread at a time, in
queue order; SUSPEND_CURRENT_QUEUE_A_MOMENT retries the same messages after a pause.
"""
from __future__ import annotations

import asyncio
import logging
import threading
import time

from shmq.errors import ShmqError
from shmq.message.names import RETRY_PREFIX
from shmq.protocol import RequestCode, request
from shmq.protocol.bodies import (LockBatchRequestBody, LockBatchResponseBody, MessageQueue as WireMQ, decode_json,
                                  encode_json)

from .consumer_core import ConsumerCore, ProcessQueue
from .handoff import ConsumePool
from .message import ConsumeResult, MessageExt, MessageQueue

log = logging.getLogger("shmq.client.push")

LOCK_RENEW_S = 20.0
LOCK_LEASE_S = 30.0  # consume only while the lock was confirmed this recently (broker: 60 s)
SUSPEND_S = 1.0
# read once: an enum member looked up on its class goes through EnumType.__getattr__ (~190 ns on
# CPython 3.11), and every listener call compared against it
_SUCCESS = ConsumeResult.SUCCESS


class PushConsumer(ConsumerCore):
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, model: str = "CLUSTERING",
                 orderly: bool = False, consume_threads: int = 20, consume_batch_size: int = 1,
                 max_reconsume_times: int = 16, suspend_time_s: float = SUSPEND_S, **kw):
        super().__init__(group, namesrv, model=model, **kw)
        self.orderly = orderly
        self.consume_threads = consume_threads
        self.consume_batch_size = consume_batch_size
        self.max_reconsume_times = max_reconsume_times
        self.suspend_time_s = suspend_time_s
        self.listener = None
        self._pool: ConsumePool | None = None
        self._inline = False

    def on_message(self, listener) -> None:
        """``listener(msgs: list[MessageExt]) -> ConsumeResult``; an exception counts as
        RECONSUME_LATER (SUSPEND_CURRENT_QUEUE_A_MOMENT for orderly consumers)."""
        self.listener = listener

    register_listener = on_message

    def start(self):
        if self.listener is None:
            raise ShmqError("set a listener with on_message() before start()")
        self._inline = self._spin_keeps_gil = self.consume_threads == 0
        self._gated = self.orderly and self.model == "CLUSTERING"  # _may_pull below
        if self._inline and not self.orderly:
            # the local pull thread calls the listener itself, with no per-batch look at which
            # thread it is (_deliver's question; that thread is never the client's loop)
            self._local_deliver = self._consume_inline
        super().start()
        if self.orderly and self.model == "CLUSTERING":
            self._bg.append(self.instance.every(LOCK_RENEW_S, self._renew_locks, f"locks-{self.group}"))
        return self

    def _instance_ready(self) -> None:
        # made once the client instance is, since its loop's selector pays the pool's wake-ups;
        # before the first rebalance, so before anything is delivered
        inst = self.instance
        self._pool = ConsumePool(max(1, self.consume_threads), f"shmq-consume-{self.group}",
                                 inst.loop.handoff, inst._thread)

    def _stop_consuming(self) -> None:
        if self._pool is not None:
            self._pool.shutdown()

    # ---- delivery ------------------------------------------------------------------------
    def _deliver(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        if self._inline and threading.current_thread() is not self.instance._thread:
            # consume_threads=0: the local pull thread calls the listener itself (no hand-off
            # to a pool: the lowest latency, one queue's messages in order, one at a time)
            if self.orderly:
                self._consume_orderly(pq)
            else:
                self._consume_pulled(pq, msgs)
            return
        if self.orderly:
            self._submit(self._consume_orderly, pq)
            return
        # one pool task per pulled batch (up to pull_batch_size messages), calling the listener
        # with consume_batch_size at a time: a task per message costs more than the message
        # (_submit's body inline: this runs once per pulled message of a caught-up consumer)
        try:
            self._pool.submit(self._consume_pulled, pq, msgs)
        except RuntimeError:  # shutting down
            pass

    def _steady_pool(self) -> tuple | None:
        # _deliver's pool case (not orderly, the loop thread) done by native/pull_steady.c
        if self.orderly or self._pool is None or type(self)._deliver is not PushConsumer._deliver:
            return None
        return self._pool.steady(self._consume_pulled)

    def _submit(self, fn, *args) -> None:
        try:
            self._pool.submit(fn, *args)
        except RuntimeError:  # shutting down
            pass

    def _call_listener(self, msgs: list[MessageExt]):
        try:
            r = self.listener(msgs)
            return r if r is not None else _SUCCESS
        except Exception:
            log.exception("%s: listener raised; the messages will be consumed again", self.group)
            return None

    # ---- concurrently --------------------------------------------------------------------
    def _consume_pulled(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        # The listener sees consume_batch_size messages at a time; the pulled batch is settled
        # (removed from the ProcessQueue, its offset committed in memory) once, at the end:
        # per message, twenty consume threads queue up on those two locks.
        n = self.consume_batch_size
        if len(msgs) <= n:
            # one listener call (a caught-up consumer's every batch), settled with the pulled list
            # itself: the loop below without the range and the second list; the listener gets a copy
            if pq.dropped:
                return
            batch = msgs[:]
            # _call_listener's body, inline (a call less per message of a caught-up consumer)
            try:
                result = self.listener(batch)
            except Exception:
                log.exception("%s: listener raised; the messages will be consumed again", self.group)
                result = None
            else:
                if result is None or result is _SUCCESS:
                    self.commit(pq, pq.remove(msgs))
                    return
            done = self._not_consumed(pq, batch, result)
            if done:
                self.commit(pq, pq.remove(msgs if len(done) == len(msgs) else done))
            return
        done: list[MessageExt] = []
        for i in range(0, len(msgs), n):
            if pq.dropped:
                return
            done += self._consume_concurrently(pq, msgs[i:i + n], settle=False)
        if len(done) == len(msgs):
            done = msgs  # all of it: the pulled list itself, which the ProcessQueue removes in one step
        if done:
            self.commit(pq, pq.remove(done))

    def _consume_inline(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        """consume_threads=0, from the local pull thread, with ``msgs`` not put in the
        ProcessQueue yet: a batch of at most consume_batch_size (a caught-up consumer's every
        batch), contiguous and above everything seen (the C record walk's), is one listener
        call and, consumed, settled in one step (``ProcessQueue.consumed``: no put, no
        remove); a batch the listener did not consume is put then and goes the usual way (sent
        back, or consumed again later), as does every other batch."""
        n, first, last = len(msgs), msgs[0].queue_offset, msgs[-1].queue_offset
        if n > self.consume_batch_size or last - first != n - 1 or first <= pq.max_seen or pq.dropped:
            pq.put(msgs)
            self._consume_pulled(pq, msgs)
            return
        # _call_listener's body, inline: this runs once per wake-up of a caught-up consumer,
        # and a Python call is ~400 instructions of the ~20,000 of one
        try:
            result = self.listener(msgs)
        except Exception:
            log.exception("%s: listener raised; the messages will be consumed again", self.group)
            result = None
        else:
            if result is None or result is _SUCCESS:
                # ConsumerCore.commit's body, inline for the same reason (keep the two alike)
                offset = pq.consumed(first, last)
                if not pq.dropped:
                    self.offsets.update(pq.mq, offset)
                if self._throttled and pq.count < self.threshold:
                    self._throttled = False
                    self._room.set()
                return
        pq.put(msgs)
        done = self._not_consumed(pq, msgs, result)
        if done:
            self.commit(pq, pq.remove(done))

    def _consume_concurrently(self, pq: ProcessQueue, msgs: list[MessageExt], settle: bool = True) -> list[MessageExt]:
        """Call the listener; returns the messages done with (consumed, or sent back for a
        retry), which ``settle`` removes and commits here."""
        if pq.dropped:
            return []
        result = self._call_listener(msgs)
        done = msgs if result is _SUCCESS else self._not_consumed(pq, msgs, result)
        if settle and done:
            self.commit(pq, pq.remove(done))
        return done

    def _not_consumed(self, pq: ProcessQueue, msgs: list[MessageExt], result) -> list[MessageExt]:
        """The listener did not answer SUCCESS for ``msgs`` (in the ProcessQueue): send them
        back for a retry (CLUSTERING), or consume again here later what the broker did not
        take; returns the messages done with."""
        done = msgs
        if self.model == "CLUSTERING":
            failed = [m for m in msgs if not self._send_back(m)]
            if failed:  # the broker did not take them back: consume them again here, later
                time.sleep(min(5.0, 0.2 * (1 + failed[0].reconsume_times)))
                for m in failed:
                    m.reconsume_times += 1
                self._submit(self._consume_concurrently, pq, failed)
                done = [m for m in msgs if not any(m is f for f in failed)]
        else:
            log.warning("%s: BROADCASTING drops %d messages the listener did not consume", self.group, len(msgs))
        return done

    def _send_back(self, m: MessageExt, delay_level: int = 0) -> bool:
        inst = self.instance
        if inst is None:
            return False
        addr = inst.master_addr(m.broker_name)
        cmd = request(RequestCode.CONSUMER_SEND_MSG_BACK, offset=m.commit_log_offset, group=self.group,
                      delayLevel=delay_level, originMsgId=m.msg_id, originTopic=m.topic, unitMode=False,
                      maxReconsumeTimes=self.max_reconsume_times)
        try:
            if addr is None:
                raise ShmqError(f"no address for {m.broker_name}")
            resp = inst.call(inst.invoke(addr, cmd, 5.0), 10)
            return resp.code == 0
        except Exception as e:
            log.debug("send back of %s failed: %s", m.msg_id, e)
            return False

    # ---- orderly -------------------------------------------------------------------------
    def _may_pull(self, pq: ProcessQueue) -> bool:
        return not self.orderly or self.model != "CLUSTERING" or pq.locked

    async def _lock(self, mqs: list[MessageQueue]) -> set[MessageQueue]:
        inst = self.instance
        by_broker: dict[str, list[MessageQueue]] = {}
        for mq in mqs:
            by_broker.setdefault(mq.broker_name, []).append(mq)
        ok: set[MessageQueue] = set()
        for broker, group in by_broker.items():
            addr = inst.master_addr(broker)
            if addr is None:
                continue
            body = LockBatchRequestBody(consumerGroup=self.group, clientId=inst.client_id,
                                        mqSet=[WireMQ(topic=m.topic, brokerName=m.broker_name, queueId=m.queue_id) for m in group])
            try:
                resp = await inst.invoke(addr, request(RequestCode.LOCK_BATCH_MQ, body=encode_json(body)))
                if resp.code == 0:
                    got = decode_json(resp.body, LockBatchResponseBody).lockOKMQSet
                    ok.update(MessageQueue(w.topic, w.brokerName, w.queueId) for w in got)
            except ShmqError as e:
                log.debug("lock on %s failed: %s", broker, e)
        return ok

    async def _queue_added(self, mq: MessageQueue) -> bool:
        if not self.orderly or self.model != "CLUSTERING":
            return True
        return mq in await self._lock([mq])

    async def _queue_removed(self, pq: ProcessQueue) -> None:
        await super()._queue_removed(pq)
        if self.orderly and self.model == "CLUSTERING":
            # wait for the consuming thread to finish its batch before giving the lock away
            await asyncio.get_running_loop().run_in_executor(None, self._wait_consume_idle, pq)
            inst = self.instance
            addr = inst.master_addr(pq.mq.broker_name)
            body = LockBatchRequestBody(consumerGroup=self.group, clientId=inst.client_id,
                                        mqSet=[WireMQ(topic=pq.mq.topic, brokerName=pq.mq.broker_name, queueId=pq.mq.queue_id)])
            try:
                if addr:
                    await inst.invoke(addr, request(RequestCode.UNLOCK_BATCH_MQ, body=encode_json(body)))
            except ShmqError:
                pass

    @staticmethod
    def _wait_consume_idle(pq: ProcessQueue) -> None:
        if pq.consume_lock.acquire(timeout=10):
            pq.consume_lock.release()

    async def _renew_locks(self) -> None:
        mqs = [mq for mq in self.pqs if not mq.topic.startswith(RETRY_PREFIX)]
        ok = await self._lock(mqs) if mqs else set()
        now = time.monotonic()
        for mq, pq in list(self.pqs.items()):
            if mq in ok or mq.topic.startswith(RETRY_PREFIX):
                pq.locked, pq.lock_until = True, now + LOCK_LEASE_S
            else:
                pq.locked = False

    def _pq_locked(self, pq: ProcessQueue) -> bool:
        if self.model != "CLUSTERING" or pq.mq.topic.startswith(RETRY_PREFIX):
            return True
        return pq.locked and time.monotonic() < pq.lock_until

    def _consume_orderly(self, pq: ProcessQueue) -> None:
        if not pq.consume_lock.acquire(blocking=False):
            return  # another thread is on this queue; it will pick up what was added
        try:
            while not pq.dropped and self._running:
                if not self._pq_locked(pq):
                    time.sleep(0.1)
                    continue
                msgs = pq.first(self.consume_batch_size)
                if not msgs:
                    return
                result = self._call_listener(msgs)
                if result is _SUCCESS:
                    self.commit(pq, pq.remove(msgs))
                    continue
                # suspend: the same messages again after a pause; past the max, to the DLQ
                if msgs[0].reconsume_times >= self.max_reconsume_times:
                    for m in msgs:
                        self._send_back(m, delay_level=-1)
                    self.commit(pq, pq.remove(msgs))
                    continue
                for m in msgs:
                    m.reconsume_times += 1
                time.sleep(self.suspend_time_s)
        finally:
            pq.consume_lock.release()
        if pq.count and not pq.dropped:
            self._submit(self._consume_orderly, pq)

    def _prepare_pq(self, pq: ProcessQueue) -> None:
        if self.orderly:  # _queue_added just took the broker's lock for it
            pq.locked, pq.lock_until = True, time.monotonic() + LOCK_LEASE_S


__all__ = ["PushConsumer"]
