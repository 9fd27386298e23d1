"""Delay levels: RocketMQ's ``messageDelayLevel`` setting and the due time of a delayed record.

A delayed message (property DELAY = level L > 0) is stored in SCHEDULE_TOPIC_XXXX, queue L-1,
and its ConsumeQueue tag code is its due time: store timestamp + delay of L
(ScheduleMessageService.computeDeliverTimestamp). The append computes that under the append
lock (``MessageStore.put(deliver_delay_ms=...)``), so within one level queue due times never
decrease; recovery recomputes it from the record with :meth:`DelayLevels.tag_code`, which
is why that function must be handed to ``MessageStore.open(tag_code=...)``.
"""
from __future__ import annotations

import re

from shmq.message.names import DELAY, SCHEDULE_TOPIC
from shmq.message.properties import decode_properties
from shmq.native import lib

from .timer_rules import TIMER_TOPIC, timer_tag_code
DEFAULT_TEXT = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"

# RocketMQ knows s m h d; "ms" is ours, so tests (and impatient users) can use short levels.
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_TOKEN = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")

# A record of SCHEDULE_TOPIC_XXXX without a usable DELAY property is due one second after it
# was stored, as in ScheduleMessageService.computeDeliverTimestamp's fallback.
_FALLBACK_DELAY_MS = 1000


class DelayLevels:
    """Levels 1..max_level and their delays in milliseconds."""

    __slots__ = ("_ms", "text")

    def __init__(self, delays_ms: list[int], text: str | None = None):
        if not delays_ms:
            raise ValueError("messageDelayLevel needs at least one level")
        if any(d < 0 for d in delays_ms):
            raise ValueError("delay levels cannot be negative")
        self._ms = tuple(int(d) for d in delays_ms)
        self.text = text if text is not None else " ".join(f"{d}ms" for d in self._ms)

    @classmethod
    def parse(cls, text: str | None = None) -> "DelayLevels":
        """Parse a messageDelayLevel value ("1s 5s 10s ... 2h"; units ms, s, m, h, d).
        Any run of whitespace separates levels. A bad token is a ValueError naming it (the
        broker refuses to start on it rather than silently dropping levels)."""
        text = DEFAULT_TEXT if text is None else text
        out = []
        for tok in text.split():
            m = _TOKEN.match(tok.strip().lower())
            if not m:
                raise ValueError(f"messageDelayLevel: cannot parse {tok!r} (expected e.g. 500ms, 1s, 2m, 1h, 1d)")
            out.append(round(float(m.group(1)) * _UNIT_MS[m.group(2)]))
        return cls(out, text)

    @property
    def max_level(self) -> int:
        return len(self._ms)

    def __len__(self) -> int:
        return len(self._ms)

    def __iter__(self):
        """(level, delay ms) pairs, level 1 first."""
        return iter(enumerate(self._ms, 1))

    def __repr__(self) -> str:
        return f"DelayLevels({self.text!r})"

    def clamp(self, level: int) -> int:
        """Levels above the maximum are clamped to it (CommitLog.asyncPutMessage)."""
        if level < 1:
            raise ValueError(f"delay level {level} is not a delay")
        return min(level, len(self._ms))

    def delay_ms(self, level: int) -> int:
        """The delay of ``level`` (clamped to max_level)."""
        return self._ms[self.clamp(level) - 1]

    @staticmethod
    def queue_id(level: int) -> int:
        return level - 1

    def tag_code(self, topic: str, props: bytes, store_ts: int) -> int:
        """The ConsumeQueue tag code of a record, for ``MessageStore.open(tag_code=...)``:
        the due time for SCHEDULE_TOPIC_XXXX records, else the hash of TAGS."""
        if topic == TIMER_TOPIC:  # a timer record: its due time (timer_rules)
            due = timer_tag_code(decode_properties(props))
            return store_ts if due is None else due
        if topic != SCHEDULE_TOPIC:
            return lib.shmq_tag_code_of_props(props, len(props))
        try:
            level = int(decode_properties(props).get(DELAY, ""))
            return store_ts + self.delay_ms(level)
        except ValueError:
            return store_ts + _FALLBACK_DELAY_MS


DEFAULT_LEVELS = DelayLevels.parse(DEFAULT_TEXT)
