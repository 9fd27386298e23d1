"""RocketMQ 5's POP bookkeeping texts (ExtraInfoUtil, KeyBuilder, BatchAck's bit set), once,
for the broker's POP processors and the Python SimpleConsumer.

``extraInfo`` / POP_CK (space separated; what ACK_MESSAGE and CHANGE_MESSAGE_INVISIBLETIME
carry back): ``ckQueueOffset popTime invisibleTime reviveQid retry brokerName queueId
[msgQueueOffset]``; ``retry`` is "0" for the topic itself, "1" for its POP retry topic
``%RETRY%<group>_<topic>`` (V1 naming, RocketMQ's default), "2" for the V2 one
(``%RETRY%<group>+<topic>``). The response header's ``startOffsetInfo`` is
``"<retry> <queueId> <startOffset>"`` per queue and ``msgOffsetInfo``
``"<retry> <queueId> <o1>,<o2>,..."``, joined with ";"; ``orderCountInfo`` (orderly POP)
``"<retry> <queueId> <count>"``. reviveQid 999 (POP_ORDER_REVIVE_QUEUE) marks an orderly POP.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass

RETRY_PREFIX = "%RETRY%"
ORDER_REVIVE_QID = 999


def pop_retry_topic(group: str, topic: str) -> str:
    """KeyBuilder.buildPopRetryTopicV1."""
    return f"{RETRY_PREFIX}{group}_{topic}"


def retry_mark(stored_topic: str) -> str:
    if stored_topic.startswith(RETRY_PREFIX):
        return "2" if "+" in stored_topic else "1"
    return "0"


def stored_topic(topic: str, group: str, mark: str) -> str:
    """The topic a message was popped from, from the request topic and the retry mark."""
    if mark == "1":
        return pop_retry_topic(group, topic)
    if mark == "2":
        return f"{RETRY_PREFIX}{group}+{topic}"
    if mark == "0":
        return topic
    raise ValueError(f"retry mark {mark!r} is not 0, 1 or 2")


@dataclass(frozen=True)
class ExtraInfo:
    ck_offset: int
    pop_time: int
    invisible_time: int
    revive_qid: int
    retry: str
    broker_name: str
    queue_id: int
    msg_offset: int | None = None

    def text(self) -> str:
        parts = [self.ck_offset, self.pop_time, self.invisible_time, self.revive_qid, self.retry,
                 self.broker_name, self.queue_id]
        if self.msg_offset is not None:
            parts.append(self.msg_offset)
        return " ".join(str(p) for p in parts)

    @classmethod
    def parse(cls, text: str) -> "ExtraInfo":
        """ValueError with the reason when ``text`` is not an extraInfo."""
        f = (text or "").split(" ")
        if len(f) < 7:
            raise ValueError(f"extraInfo {text!r} has {len(f)} fields, at least 7 expected")
        if f[4] not in ("0", "1", "2"):
            raise ValueError(f"extraInfo {text!r}: retry mark {f[4]!r}")
        return cls(int(f[0]), int(f[1]), int(f[2]), int(f[3]), f[4], f[5], int(f[6]),
                   int(f[7]) if len(f) > 7 else None)


def join_infos(items) -> str:
    """``(mark, queue id, value)`` triples as startOffsetInfo / msgOffsetInfo / orderCountInfo."""
    return ";".join(f"{m} {q} {v}" for m, q, v in items)


def parse_infos(text: str | None) -> dict[str, str]:
    """"mark@queueId" -> value (ExtraInfoUtil.parse*Info's keys)."""
    out: dict[str, str] = {}
    for one in (text or "").split(";"):
        if not one:
            continue
        f = one.split(" ")
        if len(f) != 3:
            raise ValueError(f"POP info {one!r} has {len(f)} fields, 3 expected")
        out[f"{f[0]}@{f[1]}"] = f[2]
    return out


def bitset_offsets(b64: str, start: int) -> list[int]:
    """BatchAck.bitSet (fastjson writes BitSet.toByteArray() as base64): the acked offsets."""
    raw = base64.b64decode(b64 or "")
    return [start + i * 8 + j for i, byte in enumerate(raw) for j in range(8) if byte >> j & 1]


def offsets_bitset(offsets, start: int) -> str:
    bits = 0
    for o in offsets:
        bits |= 1 << (o - start)
    n = (bits.bit_length() + 7) // 8
    return base64.b64encode(bits.to_bytes(n, "little")).decode()
