"""SimpleConsumer: RocketMQ 5's POP consumption (a consumer that is not tied to queues).

``receive(max_messages, invisible_duration)`` asks each broker of the subscribed topics for
messages (POP_MESSAGE, queue id -1: any queue, long-polled up to ``await_duration``); each
message comes back invisible to every other consumer of the group for ``invisible_duration``
seconds. ``ack(msg)`` settles it for good; ``change_invisible_duration(msg, seconds)``
pushes its reappearance out (or in). A message neither acked nor changed in time is handed
out again, to this consumer or another, with ``reconsume_times`` + 1, and goes to the
group's DLQ after maxReconsumeTimes, as for push consumers.

A received message carries its receipt in ``properties["POP_CK"]`` (RocketMQ's extraInfo
text, what ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME take); ``change_invisible_duration``
replaces it with the new one. POP needs the broker's state, so requests go over TCP even
when the client could map the store.
"""
from __future__ import annotations

import itertools
import json
import time

from shmq.errors import BrokerError, ShmqError
from shmq.protocol import RequestCode, ResponseCode, request
from shmq.protocol import pop_info as pi

from .instance import ClientInstance
from .message import MessageExt, MessageSelector, messages_from_records

POP_CK = "POP_CK"
_FOUND_NOTHING = (ResponseCode.PULL_NOT_FOUND, ResponseCode.POLLING_TIMEOUT, ResponseCode.POLLING_FULL)


class SimpleConsumer:
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, invisible_duration: float = 30.0,
                 await_duration: float = 5.0, consume_from: str = "FIRST_OFFSET", orderly: bool = False):
        self.group = group
        self.namesrv = namesrv
        self.invisible_duration = invisible_duration
        self.await_duration = await_duration
        self.init_mode = 1 if consume_from == "LAST_OFFSET" else 0   # ConsumeInitMode MAX / MIN
        self.orderly = orderly
        self.subscriptions: dict[str, MessageSelector] = {}
        self.instance: ClientInstance | None = None
        self._rr = itertools.count()

    def subscribe(self, topic: str, expression: str | MessageSelector = "*") -> "SimpleConsumer":
        sel = expression if isinstance(expression, MessageSelector) else MessageSelector.tags(expression)
        if sel.expression_type != "TAG":
            raise ShmqError("SimpleConsumer filters by tags only")
        self.subscriptions[topic] = sel
        return self

    def start(self) -> "SimpleConsumer":
        if self.instance is None:
            self.instance = ClientInstance.acquire(self.namesrv, consumer_group=self.group)
        return self

    def shutdown(self) -> None:
        if self.instance is not None:
            self.instance.release()
            self.instance = None

    def __enter__(self) -> "SimpleConsumer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.shutdown()

    # ---- receive ---------------------------------------------------------------------
    def receive(self, max_messages: int = 16, invisible_duration: float | None = None,
                await_duration: float | None = None) -> list[MessageExt]:
        if self.instance is None:
            raise ShmqError("start() the SimpleConsumer first")
        if not self.subscriptions:
            raise ShmqError("subscribe to a topic first")
        it = round(1000 * (self.invisible_duration if invisible_duration is None else invisible_duration))
        wait = self.await_duration if await_duration is None else await_duration
        topics = list(self.subscriptions)
        topic = topics[next(self._rr) % len(topics)]
        return self.instance.call(self._pop(topic, max_messages, it, wait), wait + 10)

    async def _pop(self, topic: str, n: int, it: int, wait: float) -> list[MessageExt]:
        inst = self.instance
        queues = await inst.subscribe_queues(topic)
        brokers = sorted({q.broker_name for q in queues})
        out: list[MessageExt] = []
        for i, broker in enumerate(brokers):
            addr = inst.master_addr(broker)
            if addr is None:
                continue
            last = i == len(brokers) - 1 and not out
            cmd = request(RequestCode.POP_MESSAGE, consumerGroup=self.group, topic=topic, queueId=-1,
                          maxMsgNums=n - len(out), invisibleTime=it, pollTime=round(wait * 1000) if last else 0,
                          bornTime=int(time.time() * 1000), initMode=self.init_mode, expType="TAG",
                          exp=self.subscriptions[topic].expression, order=str(self.orderly).lower())
            resp = await inst.invoke(addr, cmd, wait + 5)
            if resp.code in _FOUND_NOTHING:
                continue
            if resp.code != 0:
                raise BrokerError(resp.code, resp.remark)
            out += self._with_receipts(resp, broker, topic)
            if len(out) >= n:
                break
        return out

    @staticmethod
    def _with_receipts(resp, broker: str, topic: str) -> list[MessageExt]:
        e = resp.ext_fields
        msgs = messages_from_records(resp.body, broker)
        starts = pi.parse_infos(e.get("startOffsetInfo"))
        counts = pi.parse_infos(e.get("orderCountInfo"))
        order = [(f[0], int(f[1]), int(o)) for one in (e.get("msgOffsetInfo") or "").split(";") if one
                 for f in [one.split(" ")] for o in f[2].split(",")]
        for m, (mark, qid, off) in zip(msgs, order):
            x = pi.ExtraInfo(int(starts[f"{mark}@{qid}"]), int(e["popTime"]), int(e["invisibleTime"]),
                             int(e["reviveQid"]), mark, broker, qid, off)
            m.properties[POP_CK] = x.text()
            m.topic = topic
            c = counts.get(f"{mark}@qo{qid}%{off}")
            if c:
                m.reconsume_times = int(c)
        return msgs

    # ---- settle ----------------------------------------------------------------------
    def _receipt(self, msg: MessageExt) -> tuple[pi.ExtraInfo, str]:
        text = msg.properties.get(POP_CK)
        if not text:
            raise ShmqError("not a received message (it has no POP_CK receipt)")
        x = pi.ExtraInfo.parse(text)
        addr = self.instance.master_addr(x.broker_name) if self.instance else None
        if addr is None:
            raise ShmqError(f"no address for broker {x.broker_name}")
        return x, addr

    def _header(self, msg: MessageExt, x: pi.ExtraInfo) -> dict:
        return dict(consumerGroup=self.group, topic=pi.stored_topic(msg.topic, self.group, x.retry),
                    queueId=x.queue_id, extraInfo=msg.properties[POP_CK], offset=x.msg_offset)

    def ack(self, msg: MessageExt) -> None:
        x, addr = self._receipt(msg)
        resp = self.instance.call(self.instance.invoke(addr, request(RequestCode.ACK_MESSAGE, **self._header(msg, x))),
                                  10)
        if resp.code != 0:
            raise BrokerError(resp.code, resp.remark)

    def ack_batch(self, msgs: list[MessageExt]) -> None:
        """Ack many received messages in one BATCH_ACK_MESSAGE per broker (RocketMQ 5.3's
        BatchAckMessageRequestBody: one entry per checkpoint, the acked offsets as a bit set)."""
        by_broker: dict[str, dict[tuple, list[int]]] = {}
        topics: dict[tuple, str] = {}
        for m in msgs:
            x, _addr = self._receipt(m)
            key = (x.retry, x.queue_id, x.ck_offset, x.pop_time, x.invisible_time, x.revive_qid)
            by_broker.setdefault(x.broker_name, {}).setdefault(key, []).append(x.msg_offset)
            topics[key] = m.topic
        for broker, cks in by_broker.items():
            acks = [{"c": self.group, "t": topics[k], "r": k[0], "q": k[1], "so": k[2], "pt": k[3], "it": k[4],
                     "rq": k[5], "b": pi.offsets_bitset(offs, k[2])} for k, offs in cks.items()]
            body = json.dumps({"brokerName": broker, "acks": acks}).encode()
            addr = self.instance.master_addr(broker)
            resp = self.instance.call(self.instance.invoke(addr, request(RequestCode.BATCH_ACK_MESSAGE, body=body)), 10)
            if resp.code != 0:
                raise BrokerError(resp.code, resp.remark)

    def change_invisible_duration(self, msg: MessageExt, seconds: float) -> None:
        x, addr = self._receipt(msg)
        cmd = request(RequestCode.CHANGE_MESSAGE_INVISIBLETIME, invisibleTime=round(seconds * 1000),
                      **self._header(msg, x))
        resp = self.instance.call(self.instance.invoke(addr, cmd), 10)
        if resp.code != 0:
            raise BrokerError(resp.code, resp.remark)
        e = resp.ext_fields
        msg.properties[POP_CK] = pi.ExtraInfo(x.msg_offset, int(e["popTime"]), int(e["invisibleTime"]),
                                              int(e["reviveQid"]), x.retry, x.broker_name, x.queue_id,
                                              x.msg_offset).text()


__all__ = ["SimpleConsumer"]
