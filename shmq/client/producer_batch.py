"""The producer's batch sends: ``send_batch``'s Python steps (``_send_batch``, its tries, the
batch body) and ``send_batch_async``, as a mixin of ``Producer`` (client/producer.py), which holds
the route, queue selection, local links and the single sends they use."""
from __future__ import annotations

import time

from shmq.errors import BrokerError, InvalidMessage, MessageTooLarge, RemotingError, ShmqError, StaleSegment
from shmq.message.batch import encode_batch
from shmq.message.names import RETRY_PREFIX
from shmq.message.properties import encode_properties
from shmq.store import validate

from .local_send import MAX_BATCH_BYTES, _tags_head
from .message import UNIQ_KEY, Message, MessageQueue, SendResult, _ids_text
from .remote_send import RETRY_CODES, AsyncSend
from .route import TopicPublishInfo
from .send_future import SendFuture, done_future as _done
from .sync_send import encode_plain_batch, exchange


class BatchSends:
    """``send_batch`` (after ProducerBase's C step) and ``send_batch_async``; no state of its own
    (``__slots__ = ()``: the Producer's layout is its C base's)."""

    __slots__ = ()

    def _send_batch(self, msgs: list[Message], timeout: float | None = None) -> SendResult:
        """``send_batch``: one topic, no delay, not a retry topic, at most 4 MiB encoded: stored as
        consecutive messages of one queue. ``msg_id`` of the result is the comma-joined UNIQ_KEYs."""
        if not msgs:
            raise InvalidMessage("an empty batch")
        if self._fast is not None:
            r = self._fast.send_batch(msgs)
            if r is not None:
                return r
        batch, ids = self._batch_body(msgs)
        info = self._publish_info(msgs[0].topic)
        return self._batch_tries(batch, ids, info, time.monotonic() + (timeout or self.send_timeout))

    def _batch_tries(self, batch: bytes, ids, info: TopicPublishInfo, deadline: float,
                     mq: MessageQueue | None = None, failed: Exception | None = None) -> SendResult:
        """``_send_batch``'s tries of the encoded ``batch``, each to the next queue (avoiding the
        broker that failed last). ``mq``: the first try's queue, already drawn
        (client/sync_send.send_batch_plain); with ``failed``, that try was made and raised it."""
        last: Exception | None = None
        avoid = None
        first = 0
        if failed is not None:
            if isinstance(failed, BrokerError) and failed.code not in RETRY_CODES:
                raise failed
            last, avoid, mq, first = failed, mq.broker_name, None, 1
        for _ in range(first, 1 + self.retry_times):
            if mq is None:
                mq = self._select(info, avoid)
            try:
                link = None if info.via_default else self.links.get(mq.broker_name)
                if link is not None:
                    if ids.__class__ is bytes:
                        ids = _ids_text(ids)
                    return self._send_local(link, mq, None, batch, {}, 0, info, batch_ids=ids)
                inst = self._inst()
                addr = inst.master_addr(mq.broker_name)
                if addr is None:
                    raise RemotingError(f"no address for broker {mq.broker_name}")
                left = max(0.001, deadline - time.monotonic())
                r = exchange(self, addr, mq, True, 0, None, batch, ids, left)  # in C (client/sync_send.py)
                if r is not None:
                    return r
                req = self._remote(mq, 0, batch, "", 0, batch=True, oneway=False)
                resp = self._invoke_sync(addr, req, left)
                return self._send_result(resp, mq, ids)
            except (RemotingError, BrokerError, StaleSegment) as e:
                if isinstance(e, BrokerError) and e.code not in RETRY_CODES:
                    raise
                last, avoid, mq = e, mq.broker_name, None
        raise last

    def _batch_body(self, msgs: list[Message]) -> tuple[bytes, bytes | str]:
        """The SEND_BATCH_MESSAGE body of ``msgs`` and their UNIQ_KEYs. A list of plain messages of
        one topic and tags (what the local send's ``hot_send_batch`` takes) is checked and encoded
        in one C call, the same encoder as the local batch's (ids: 32*n raw bytes, formatted when
        the result's msg_id is read); anything else here, raising the precise error (ids
        comma-joined)."""
        topic = msgs[0].topic
        if msgs.__class__ is list and topic.__class__ is str and not topic.startswith(RETRY_PREFIX):
            tags = msgs[0].tags
            head = _tags_head(tags) if tags else b""
            r = None
            if head is not None and topic_sendable(topic):
                self._remember_sendable(topic)  # (send_batch_plain's check too)
                r = encode_plain_batch(msgs, head, self.max_message_size)
            if r is not None and r.__class__ is not int:
                return r
        entries, ids = [], []
        for m in msgs:
            if m.topic != topic:
                raise InvalidMessage("the topic of the messages in one batch should be the same")
            if m.delay_level:
                raise InvalidMessage("TimeDelayLevel is not supported for batching")
            if topic.startswith(RETRY_PREFIX):
                raise InvalidMessage("retry group topic is not supported for batching")
            body, props, _ = self._prepare(m, compress=False)
            ids.append(props[UNIQ_KEY])
            entries.append((body, encode_properties(props).encode(), m.flag))
        batch = encode_batch(entries)
        if len(batch) > MAX_BATCH_BYTES:
            raise MessageTooLarge(len(batch), MAX_BATCH_BYTES)
        return batch, ",".join(ids)

    def send_batch_async(self, msgs: list[Message], callback=None, timeout: float | None = None
                         ) -> SendFuture:
        """``send_batch`` without waiting (RocketMQ's ``send(Collection, SendCallback)``): a Future of
        its SendResult, ``callback(result_or_exception)`` when done. Over TCP several batches are in
        flight on the one connection (retried on the same broker as ``send_async``); the same
        checks as ``send_batch``, whose errors the Future carries."""
        try:
            if not msgs:
                raise InvalidMessage("an empty batch")
            if self._fast is not None:  # (a never-local producer's _hot_batch is a sync TCP send)
                r = self._hot_batch(msgs)
                if r is None:
                    r = self._fast.send_batch(msgs)
                if r is not None:
                    return _done(callback, r)
            batch, ids = self._batch_body(msgs)
            info = self._publish_info(msgs[0].topic)
            mq = self._select(info, None)
            link = None if info.via_default else self.links.get(mq.broker_name)
            if link is not None:
                return _done(callback, self._send_local(link, mq, None, batch, {}, 0, info,
                                                        batch_ids=ids if ids.__class__ is str else _ids_text(ids)))
            req = self._remote(mq, 0, batch, "", 0, batch=True, oneway=False)
        except Exception as e:
            return _done(callback, e)
        send = AsyncSend(self, callback, mq, req, ids, timeout or self.send_timeout)
        try:
            send.submit()
        except Exception as e:  # noqa: BLE001
            if not send.done():
                send._fail(e)
        return send


def topic_sendable(topic: str) -> bool:
    """Whether ``topic`` passes ``_prepare``'s topic check (a batch's C encoder, a route's
    arrival); otherwise the Python path raises the precise error."""
    try:
        validate.check_sendable_topic(topic)
    except ShmqError:
        return False
    return True
