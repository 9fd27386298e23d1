"""Timer messages on the write path: RocketMQ 5's rule for which message waits in the timer
wheel, when it is due, and how it is stored meanwhile (HookUtils.checkIfTimerMessage /
transformTimerMessage), with shmq's one deliberate difference: never early.

A message is a timer message when it carries TIMER_DELIVER_MS (absolute ms), TIMER_DELAY_SEC
or TIMER_DELAY_MS (relative; checked in that order: DELAY_SEC wins), is not transactional
(or is a commit), has no DELAY level (a DELAY level wins and the TIMER_* properties are
dropped) and is not already a timer record (topic ``rmq_sys_wheel_timer`` or TIMER_OUT_MS
present: that is how a delivered timer message is kept from being timed again).

Due time: ``deliver_ms`` rounded *up* to ``timerPrecisionMs`` (default 1 in shmq, so exact).
RocketMQ rounds down (and takes one precision step off exact multiples), which fires up to
one precision early; shmq never fires before the time the producer asked for.
- due <= now: not a timer at all, stored in its own topic (delivered now), unless it is a
  recall marker (TIMER_DEL_UNIQKEY), which is then refused;
- due - now > timerMaxDelaySec: refused (MESSAGE_ILLEGAL, RocketMQ's remark);
- a value that is not an integer: refused the same way; nothing is stored.
Otherwise the message is stored in ``rmq_sys_wheel_timer`` with TIMER_OUT_MS = due,
REAL_TOPIC and REAL_QID; its ConsumeQueue tag code is the due time. Queue 0 holds timers,
queue 1 recall markers (RocketMQ keeps both in queue 0; shmq separates them so a restart
reads only the markers' records, not every pending timer's).
"""
from __future__ import annotations

from dataclasses import dataclass

from shmq.errors import InvalidMessage, ShmqError
from shmq.message.names import (REAL_QID as P_REAL_QID, REAL_TOPIC as P_REAL_TOPIC,  # noqa: F401
                                TIMER_DEL_UNIQKEY as P_TIMER_DEL_UNIQKEY, TIMER_DELAY_MS as P_TIMER_DELAY_MS,
                                TIMER_DELAY_SEC as P_TIMER_DELAY_SEC, TIMER_DELIVER_MS as P_TIMER_DELIVER_MS,
                                TIMER_DEQUEUE_MS as P_TIMER_DEQUEUE_MS, TIMER_ENQUEUE_MS as P_TIMER_ENQUEUE_MS,
                                TIMER_OUT_MS as P_TIMER_OUT_MS, TIMER_ROLL_TIMES as P_TIMER_ROLL_TIMES, TIMER_TOPIC)

TIMER_QID = 0
MARKER_QID = 1

#: shmq's: on every record the timer service appends, "<qid>:<queue offset>" of its source
#: entry (crash recovery settles that entry from it; see timer_marks)
P_TIMER_SRC = "SHMQ_TIMER_SRC"

#: the bytes that mark a properties text the fast path must not store as it is
SLOW_MARK = b"TIMER_"

DEFAULT_MAX_DELAY_SEC = 3 * 24 * 3600      # timerMaxDelaySec, RocketMQ's default
WHEEL_NOT_ENABLED = 1                      # RocketMQ answers SYSTEM_ERROR


@dataclass(frozen=True)
class TimerSettings:
    """The broker keys: timerWheelEnable, timerMaxDelaySec, timerPrecisionMs."""

    enable: bool = True
    max_delay_sec: int = DEFAULT_MAX_DELAY_SEC
    precision_ms: int = 1

    def __post_init__(self):
        if self.precision_ms < 1:
            raise ValueError("timerPrecisionMs must be at least 1")
        if self.max_delay_sec < 1:
            raise ValueError("timerMaxDelaySec must be at least 1")

    def illegal(self, why: str) -> InvalidMessage:
        return InvalidMessage(
            f"timer message illegal, the delay time should not be bigger than the max delay "
            f"{self.max_delay_sec * 1000}ms; or if set del msg, the delay time should be bigger than "
            f"the current time ({why})")


DEFAULT_TIMER = TimerSettings()


def wants_timer(props: dict, topic: str) -> bool:
    """checkIfTimerMessage for a message without a DELAY level."""
    if topic == TIMER_TOPIC or P_TIMER_OUT_MS in props:
        return False
    return P_TIMER_DELIVER_MS in props or P_TIMER_DELAY_MS in props or P_TIMER_DELAY_SEC in props


def drop_timer_properties(props: dict) -> None:
    """A DELAY level wins over TIMER_*: they are removed (checkIfTimerMessage)."""
    for k in (P_TIMER_DELIVER_MS, P_TIMER_DELAY_SEC, P_TIMER_DELAY_MS):
        props.pop(k, None)


def _int(props: dict, name: str, settings: TimerSettings) -> int:
    v = props[name]
    try:
        return int(v.strip())
    except ValueError:
        raise settings.illegal(f"{name}={v!r} is not an integer") from None


def due_ms(props: dict, now_ms: int, settings: TimerSettings = DEFAULT_TIMER) -> int:
    """The due time the properties ask for (not rounded)."""
    if P_TIMER_DELAY_SEC in props:
        return now_ms + _int(props, P_TIMER_DELAY_SEC, settings) * 1000
    if P_TIMER_DELAY_MS in props:
        return now_ms + _int(props, P_TIMER_DELAY_MS, settings)
    return _int(props, P_TIMER_DELIVER_MS, settings)


def rewrite(topic: str, queue_id: int, props: dict, now_ms: int,
            settings: TimerSettings = DEFAULT_TIMER) -> tuple[int, int] | None:
    """Apply transformTimerMessage to ``props`` in place. Returns (timer queue id, due ms)
    when the message goes to the wheel, None when it is stored as it is (due already)."""
    if not settings.enable:
        raise ShmqError(f"accurate timer message is not enabled, timerWheelEnable is false",
                        code=WHEEL_NOT_ENABLED)
    due = due_ms(props, now_ms, settings)
    marker = P_TIMER_DEL_UNIQKEY in props
    if due <= now_ms:
        if marker:
            raise settings.illegal("a recall for a time already past")
        return None
    if due - now_ms > settings.max_delay_sec * 1000:
        raise settings.illegal(f"due in {due - now_ms} ms")
    p = settings.precision_ms
    due = -(-due // p) * p
    props[P_TIMER_OUT_MS] = str(due)
    props[P_REAL_TOPIC] = topic
    props[P_REAL_QID] = str(queue_id)
    return (MARKER_QID if marker else TIMER_QID), due


def delete_key(real_topic: str, uniq_key: str) -> str:
    """TimerMessageStore.buildDeleteKey."""
    return f"{real_topic}+{uniq_key}"


def timer_tag_code(props: dict) -> int | None:
    """The ConsumeQueue tag code of a stored timer record (its due time), for recovery."""
    try:
        return int(props[P_TIMER_OUT_MS])
    except (KeyError, ValueError):
        return None

