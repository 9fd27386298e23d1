"""Recalling a timer message before it is due: RocketMQ 5.3's RECALL_MESSAGE (370) and its
handle (RecallMessageHandle.HandleV1), on the same write path as every other message.

The handle is what a timer send answers in ``recallHandle``: URL-safe base64 of
``"v1 <topic> <brokerName> <due ms + 1> <UNIQ_KEY>"``. A recall stores a marker (body "0",
tag ``_RECALL_TAG_``, TIMER_DEL_UNIQKEY = ``<topic>+<UNIQ_KEY>``, TIMER_DELIVER_MS = the
handle's time) that the put pipeline routes to the timer topic (timer_rules); the wheel
(timer_store) then never delivers the message with that key. Checks, as
RecallMessageProcessor: a readable handle (else ILLEGAL_OPERATION), the topic and broker it
names (else ILLEGAL_OPERATION), a time still ahead and within timerMaxDelaySec (else
ILLEGAL_OPERATION "recall failed, timestamp invalid"). A recall that reaches the wheel
after its message fired has no effect; the answer cannot tell, as in RocketMQ.
"""
from __future__ import annotations

import base64
import binascii

from shmq.errors import ShmqError
from shmq.native import lib

from . import timer_rules as tr
from .put import PutRequest

ILLEGAL_OPERATION = 604
RECALL_TAG = "_RECALL_TAG_"


def build_handle(topic: str, broker_name: str, timestamp_ms: int, msg_id: str) -> str:
    raw = " ".join(("v1", topic, broker_name, str(timestamp_ms), msg_id))
    return base64.urlsafe_b64encode(raw.encode()).decode()


def decode_handle(handle: str) -> tuple[str, str, str, str]:
    """(topic, brokerName, timestamp text, msgId); ShmqError 604 when unreadable."""
    try:
        items = base64.urlsafe_b64decode(handle.encode()).decode().split(" ")
    except (binascii.Error, UnicodeError, ValueError):
        raise ShmqError("recall handle is invalid", code=ILLEGAL_OPERATION) from None
    if len(items) < 5 or items[0] != "v1":
        raise ShmqError("recall handle is invalid", code=ILLEGAL_OPERATION)
    return items[1], items[2], items[3], items[4]


def marker_request(topic: str, handle: str, broker_name: str, settings: tr.TimerSettings,
                   producer_group: str | None = None, now_ms: int | None = None) -> tuple[PutRequest, str]:
    """The checked marker put for ``handle`` and the recalled message's id."""
    h_topic, h_broker, ts_text, msg_id = decode_handle(handle)
    if h_topic != topic:
        raise ShmqError("recall failed, topic not match", code=ILLEGAL_OPERATION)
    if h_broker != broker_name:
        raise ShmqError("recall failed, broker service not available", code=ILLEGAL_OPERATION)
    now = lib.shmq_now_ms() if now_ms is None else now_ms
    try:
        left = int(ts_text) - now
    except ValueError:
        left = -1
    if left <= 0 or left >= settings.max_delay_sec * 1000:
        raise ShmqError("recall failed, timestamp invalid", code=ILLEGAL_OPERATION)
    props = {"TAGS": RECALL_TAG, tr.P_TIMER_DEL_UNIQKEY: tr.delete_key(topic, msg_id), "UNIQ_KEY": msg_id,
             tr.P_TIMER_DELIVER_MS: ts_text, "BORN_TIMESTAMP": str(now)}
    if producer_group:
        props["PGROUP"] = producer_group
    return PutRequest(topic, b"0", props, queue_id=0, client=False), msg_id


def recall(pipeline, topic: str, handle: str, broker_name: str, producer_group: str | None = None) -> str:
    """Store the marker through ``pipeline``; returns the recalled message's id."""
    req, msg_id = marker_request(topic, handle, broker_name, pipeline.timer, producer_group)
    pipeline.put(req, wait_flush=False)
    return msg_id
