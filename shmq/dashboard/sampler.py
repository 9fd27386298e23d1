"""Time series for the live charts: every ``interval`` seconds, messages stored per topic
(turned into rates) and lag per consumer group, from the same admin requests the pages use.
The browser polls ``/api/series`` and redraws; a page never reloads."""
from __future__ import annotations

import logging
import threading
import time
from collections import deque

from shmq.service import ThreadService

log = logging.getLogger("shmq.dashboard")

#: Points kept per series (10 minutes at the default 2 s).
KEEP = 300
#: Topics and groups followed at once (the busiest first would need the data we sample).
MAX_SERIES = 40


class Sampler(ThreadService):
    """A round samples; a NameServer or broker away makes a failed round (logged at debug),
    and the next one tries again."""

    def __init__(self, api, interval: float = 2.0):
        super().__init__("shmq-dashboard-sampler", interval, log=log, first_delay_s=0, error_level=logging.DEBUG)
        self.api = api
        self.times: deque[float] = deque(maxlen=KEEP)
        self.rates: dict[str, deque] = {}
        self.lags: dict[str, deque] = {}
        self._last: dict[str, tuple[float, int]] = {}
        self._lock = threading.Lock()

    def run_once(self) -> None:
        self.sample()

    def sample(self) -> None:
        topics = [t["topic"] for t in self.api.topics() if not t["system"]][:MAX_SERIES]
        totals = self.api.topic_totals(topics)
        lags = {}
        for g in self.api.groups()[:MAX_SERIES]:
            try:
                lags[g] = self.api.group_lag(g)
            except Exception:  # a group with nothing to report yet
                continue
        now = time.time()
        with self._lock:
            self.times.append(now)
            n = len(self.times)
            for t, total in totals.items():
                prev = self._last.get(t)
                rate = (total - prev[1]) / (now - prev[0]) if prev and now > prev[0] else 0.0
                self._last[t] = (now, total)
                self._append(self.rates, t, max(rate, 0.0), n)
            for g, lag in lags.items():
                self._append(self.lags, g, lag, n)
            for d, live in ((self.rates, totals), (self.lags, lags)):
                for k in [k for k in d if k not in live]:  # deleted topics and groups leave the charts
                    del d[k]

    @staticmethod
    def _append(d: dict, key: str, value: float, n: int) -> None:
        q = d.get(key)
        if q is None:
            q = d[key] = deque([None] * (n - 1), maxlen=KEEP)
        q.append(value)

    def series(self) -> dict:
        with self._lock:
            n = len(self.times)

            def pad(q):
                v = list(q)
                return [None] * (n - len(v)) + v
            return {"t": list(self.times), "rates": {k: pad(q) for k, q in self.rates.items()},
                    "lags": {k: pad(q) for k, q in self.lags.items()}}
