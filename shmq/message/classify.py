"""What the broker does with a message, decided once. The broker's send processor, the put
pipeline and the local producer all ask :func:`classify`, so a message takes the same road
(and is stored as the same bytes) whichever way it came.

=========  ==============================================================================
kind       what happens
=========  ==============================================================================
PLAIN      stored in its topic and queue as sent (WAIT dropped, CLUSTER set: see
           ``properties.stored_properties``)
RETRY      sent to a ``%RETRY%<group>`` topic: the pipeline decides between the retry topic
           (with its delay) and ``%DLQ%<group>`` by the reconsume count
HALF       TRAN_MSG=true: a transaction's half message, stored in RMQ_SYS_TRANS_HALF_TOPIC
           with REAL_TOPIC / REAL_QID until the producer commits or rolls back
DELAYED    DELAY > 0 on a non-transactional or committed message: stored in
           SCHEDULE_TOPIC_XXXX queue level-1 until due
TIMER      TIMER_DELIVER_MS / TIMER_DELAY_SEC / TIMER_DELAY_MS (RocketMQ 5.x) and no
           TIMER_OUT_MS (a fired timer carries it and is PLAIN): the pipeline stores it in
           rmq_sys_wheel_timer until due (shmq.store.timer_rules)
COMMIT     sysFlag transaction type COMMIT, not delayed: stored in its topic
ROLLBACK   sysFlag transaction type ROLLBACK: stored without a ConsumeQueue entry
=========  ==============================================================================

Precedence: a retry topic wins over everything (the pipeline then asks :func:`kind_of` about
the rest), then ROLLBACK, HALF (not for a commit), DELAYED (not for a prepared message: a
half message is never delayed; Java clients clear DELAY and the commit re-puts it through
``put_inner``, which applies any delay then), TIMER.
"""
from __future__ import annotations

import enum
from collections.abc import Mapping

from .layout import TX_COMMIT_TYPE, TX_PREPARED_TYPE, TX_ROLLBACK_TYPE, TX_TYPE_MASK
from .names import (DELAY, RETRY_PREFIX, TIMER_DELAY_MS, TIMER_DELAY_SEC, TIMER_DELIVER_MS, TIMER_OUT_MS,
                    TRAN_MSG)
from .properties import pair_key, pair_value


class Kind(enum.Enum):
    PLAIN = "plain"
    RETRY = "retry"
    HALF = "half"
    DELAYED = "delayed"
    TIMER = "timer"
    COMMIT = "commit"
    ROLLBACK = "rollback"


PLAIN, RETRY, HALF, DELAYED = Kind.PLAIN, Kind.RETRY, Kind.HALF, Kind.DELAYED
TIMER, COMMIT, ROLLBACK = Kind.TIMER, Kind.COMMIT, Kind.ROLLBACK

#: properties that can make a message anything but PLAIN: a text without any of them is PLAIN
#: (unless the topic is a retry topic or the sysFlag carries a transaction type)
DECISIVE = frozenset({TRAN_MSG, DELAY, TIMER_DELIVER_MS, TIMER_DELAY_SEC, TIMER_DELAY_MS})
_KEY_OUT = pair_key(TIMER_OUT_MS)
_KEYS = {name: pair_key(name) for name in DECISIVE}


def is_true(v: str | None) -> bool:
    """``Boolean.parseBoolean``."""
    return v is not None and v.strip().lower() == "true"


def delay_level(v: str | None) -> int:
    """DELAY as an int (``Message.getDelayTimeLevel``); 0 when absent; ValueError when it is
    not an integer."""
    return 0 if v is None else int(v.strip())


def _get(props, name: str) -> str | None:
    if isinstance(props, Mapping):
        return props.get(name)
    return pair_value(props, _KEYS[name])


def classify(topic: str, props=None, sysflag: int = 0) -> Kind:
    """The kind of a message sent to ``topic`` with properties ``props`` (the properties text
    as bytes or str, or a dict) and ``sysflag``."""
    if topic.startswith(RETRY_PREFIX):
        return RETRY
    if not sysflag & TX_TYPE_MASK and (not props or (props.__class__ is str and _may_decide_text(props) is False)
                                       or (props.__class__ is bytes and _may_decide(props) is False)):
        return PLAIN  # the common send, decided without a dict
    return kind_of(props, sysflag)


def kind_of(props=None, sysflag: int = 0) -> Kind:
    """:func:`classify` without the topic: what the properties and the transaction type of the
    sysFlag make of a message. A DELAY that is no integer counts as DELAYED (the pipeline then
    refuses it with a clear error)."""
    tx = sysflag & TX_TYPE_MASK
    if tx == TX_ROLLBACK_TYPE:
        return ROLLBACK
    if props:
        if props.__class__ is str:
            props = props.encode()
        if props.__class__ is dict or isinstance(props, Mapping) or _may_decide(props):
            if tx != TX_COMMIT_TYPE and is_true(_get(props, TRAN_MSG)):
                return HALF
            if tx != TX_PREPARED_TYPE:
                try:
                    if delay_level(_get(props, DELAY)) > 0:
                        return DELAYED
                except ValueError:
                    return DELAYED
            if (_get(props, TIMER_DELIVER_MS) is not None or _get(props, TIMER_DELAY_SEC) is not None
                    or _get(props, TIMER_DELAY_MS) is not None) and not _fired(props):
                return TIMER
    return COMMIT if tx == TX_COMMIT_TYPE else PLAIN


def _fired(props) -> bool:
    """TIMER_OUT_MS present: a timer the wheel fired (or rolled), never timed again."""
    if isinstance(props, Mapping):
        return TIMER_OUT_MS in props
    return pair_value(props, _KEY_OUT) is not None


def _may_decide(raw: bytes) -> bool:
    """A quick filter for the common text (the broker's hot path): False when no DECISIVE name
    can be in it; True sends it to the exact, pair-by-pair reading."""
    return raw.find(b"DELAY\x01") >= 0 or raw.find(b"TRAN_MSG\x01") >= 0 or raw.find(b"TIMER_") >= 0


def _may_decide_text(text: str) -> bool:
    """:func:`_may_decide` of a str (a remoting header's properties: str search is faster)."""
    return "DELAY\x01" in text or "TRAN_MSG\x01" in text or "TIMER_" in text


#: the kinds stored in the topic and queue they were sent to, with their properties as sent
AS_SENT = frozenset({PLAIN, COMMIT, ROLLBACK})
