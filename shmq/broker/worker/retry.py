"""CONSUMER_SEND_MSG_BACK: a consumer could not process a message (RECONSUME_LATER) and hands
it back to the broker, which stores a copy to be consumed again later from ``%RETRY%<group>``,
or, once it has been retried often enough, parks it in ``%DLQ%<group>``
(RocketMQ's SendMessageProcessor.asyncConsumerSendMsgBack).

The copy: the record at the request's commit-log offset, same body, flag, sysflag, born
timestamp and host and properties, plus
  - RETRY_TOPIC = the topic it was first consumed from (kept when already set, so a message
    retried many times still names its original topic; push consumers put it back);
  - ORIGIN_MESSAGE_ID = the stored ORIGIN_MESSAGE_ID, else the record's offset msgId;
  - reconsumeTimes = the record's + 1;
  - to ``%RETRY%G`` (a random queue of the group's retryQueueNums, 1) with delay level =
    the request's, or 3 + the record's reconsumeTimes when the request says 0; the delay
    sends it through SCHEDULE_TOPIC_XXXX (PutPipeline.put_inner), so a consumer sees it again
    after 10 s, 30 s, 1 m, ... with the default levels;
  - to ``%DLQ%G`` queue 0, without delay, when the record's reconsumeTimes >= maxReconsumeTimes
    (16 unless the request says otherwise) or the request's delay level is negative.

What stays with the processor (it has the tables): the subscription group must exist
(SUBSCRIPTION_GROUP_NOT_EXIST 26), the broker must be writable (NO_PERMISSION 16), a group
with retryQueueNums <= 0 is answered SUCCESS without storing anything, and the retry and DLQ
topics are created through the pipeline's ``on_new_topic`` hook (1 queue, perm 6).
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from shmq.errors import InvalidMessage, ShmqError, StoreCorrupt
from shmq.message.names import DELAY, ORIGIN_MESSAGE_ID, RETRY_TOPIC, dlq_topic, retry_topic
from shmq.message.record import decode_record
from shmq.store.put import DEFAULT_MAX_RECONSUME_TIMES, DLQ_QUEUE_NUMS, PipelineResult, PutPipeline

SYSTEM_ERROR = 1

# SendMessageProcessor: delayLevel 0 means "let the broker choose", which is 3 + reconsume
# times: the first retry waits level 3 (10 s by default), each later one a level longer.
FIRST_RETRY_LEVEL = 3


@dataclass(slots=True)
class SendBackResult:
    topic: str              # %RETRY%G or %DLQ%G
    queue_id: int
    reconsume_times: int    # of the stored copy
    delay_level: int        # 0 for a dead letter (clamped to the maximum level otherwise)
    dead: bool              # went to %DLQ%G
    put: PipelineResult


def send_back(pipeline: PutPipeline, record_offset: int, group: str, delay_level: int = 0,
              origin_msg_id: str | None = None, origin_topic: str | None = None,
              max_reconsume_times: int | None = None, *, retry_queue_nums: int = 1) -> SendBackResult:
    """Store the retry (or dead-letter) copy of the record at ``record_offset``.

    ``origin_msg_id`` / ``origin_topic`` are the request header's; RocketMQ uses them only for
    its consume hooks (the stored record is the truth), and so do we: they are accepted and
    not trusted. ``max_reconsume_times`` None means the default, 16 (pass the header's value
    when the request version is >= 121 (V3_4_9) and it is set, else the group's retryMaxTimes).

    Raises ShmqError with code SYSTEM_ERROR (1) when there is no readable record at the offset
    ("look message by offset failed, N", as RocketMQ answers), and the store's errors (each
    with its ``code``) when the put fails; RocketMQ answers any failed put SYSTEM_ERROR with
    the put status as remark. The put does not wait for a SYNC_FLUSH (RocketMQ sets
    waitStoreMsgOK=false for it).
    """
    store = pipeline.store
    rec = store.read_at(record_offset) if record_offset >= 0 else None
    if rec is None:
        raise ShmqError(f"look message by offset failed, {record_offset}", code=SYSTEM_ERROR)
    try:
        msg = decode_record(rec)
    except StoreCorrupt:
        raise ShmqError(f"look message by offset failed, {record_offset}", code=SYSTEM_ERROR) from None
    if not group:
        raise InvalidMessage("CONSUMER_SEND_MSG_BACK needs a consumer group")

    props = dict(msg.properties)
    props.setdefault(RETRY_TOPIC, msg.topic)
    if not props.get(ORIGIN_MESSAGE_ID):
        props[ORIGIN_MESSAGE_ID] = msg.offset_msg_id
    max_times = DEFAULT_MAX_RECONSUME_TIMES if max_reconsume_times is None else max_reconsume_times

    if msg.reconsume_times >= max_times or delay_level < 0:
        topic, queue_id, level, dead = dlq_topic(group), 0, 0, True
        props.pop(DELAY, None)
        pipeline.announce_topic(topic, DLQ_QUEUE_NUMS)
    else:
        nq = max(retry_queue_nums, 1)
        topic, queue_id, dead = retry_topic(group), random.randrange(nq), False
        level = delay_level or FIRST_RETRY_LEVEL + msg.reconsume_times
        props[DELAY] = str(level)
        pipeline.announce_topic(topic, nq)

    res = pipeline.put_inner(topic, queue_id, bytes(msg.body), props, flag=msg.flag, sysflag=msg.sysflag,
                             born_timestamp=msg.born_timestamp, born_host=msg.born_host,
                             reconsume_times=msg.reconsume_times + 1, wait_flush=False)
    return SendBackResult(topic, queue_id, msg.reconsume_times + 1, res.delay_level, dead, res)


# ---- for the processors ------------------------------------------------------------------
V3_4_9 = 121  # MQVersion V3_4_9: from this request version on, the header's maxReconsumeTimes counts


def max_reconsume_times_of(request_version: int, header_value: int | None,
                           group_retry_max_times: int = DEFAULT_MAX_RECONSUME_TIMES) -> int:
    """The maxReconsumeTimes a SEND_MESSAGE to %RETRY%G or a CONSUMER_SEND_MSG_BACK obeys:
    the header's when the client is new enough to send it, else the group's retryMaxTimes."""
    if request_version >= V3_4_9 and header_value is not None:
        return header_value
    return group_retry_max_times


def answer_send_back(pipeline: PutPipeline, offset: int, group: str, delay_level: int,
                     max_reconsume_times: int | None, request_version: int, *,
                     group_retry_max_times: int = DEFAULT_MAX_RECONSUME_TIMES, retry_queue_nums: int = 1,
                     origin_msg_id: str | None = None, origin_topic: str | None = None) -> tuple[int, str | None]:
    """CONSUMER_SEND_MSG_BACK's (response code, remark) once the processor has checked the
    group exists (26) and the broker is writable (16). A group with retryQueueNums <= 0 is
    answered SUCCESS without storing (as RocketMQ does); any failure is SYSTEM_ERROR with
    the reason as remark (RocketMQ puts the put status there)."""
    if retry_queue_nums <= 0:
        return 0, None
    limit = max_reconsume_times_of(request_version, max_reconsume_times, group_retry_max_times)
    try:
        send_back(pipeline, offset, group, delay_level, origin_msg_id, origin_topic, limit,
                  retry_queue_nums=retry_queue_nums)
    except ShmqError as e:
        return SYSTEM_ERROR, e.remark or str(e)
    return 0, None
