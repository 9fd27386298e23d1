"""Supervisor side of what workers count: the last cumulative push of each worker process.

A push replaces the previous one of the same process (worker id and pid), so a lost or
repeated push changes nothing. A worker that died keeps its last push in the totals: counters
summed over processes then never go back when a worker is restarted.
"""
from __future__ import annotations

import json
import logging
import threading

log = logging.getLogger("shmq.broker.metrics")


class WorkerFeeds:
    def __init__(self) -> None:
        self._lock = threading.Lock()  # pushes arrive on the event loop, scrapes on the HTTP thread
        self._pushes: dict[tuple[int, int], dict] = {}
        #: (topic, group, queue id) -> highest pulled offset over every worker
        self.pulled: dict[tuple[str, str, int], int] = {}

    def on_push(self, conn, cmd) -> None:
        """Ctl.METRICS handler (oneway)."""
        try:
            data = json.loads(cmd.body)
            key = (int(conn.context.get("worker", 0)), int(conn.context.get("pid", 0)))
        except (ValueError, TypeError):
            log.warning("metrics push that is not JSON ignored")
            return None
        with self._lock:
            self._pushes[key] = data
            for t, g, q, o in data.get("pulled", ()):
                k = (t, g, q)
                if o > self.pulled.get(k, -1):
                    self.pulled[k] = o
        return None

    def totals(self):
        """(puts, rpc {(code, resp): [buckets..., sum]}, out {(topic, group): [msgs, bytes]},
        pulled {(topic, group, qid): offset}) summed over every worker process seen."""
        puts = 0
        rpc: dict[tuple[int, int], list[float]] = {}
        out: dict[tuple[str, str], list[int]] = {}
        with self._lock:
            pushes = list(self._pushes.values())
            pulled = dict(self.pulled)
        for p in pushes:
            puts += p.get("puts", 0)
            for code, resp, buckets, total in p.get("rpc", ()):
                row = rpc.get((code, resp))
                if row is None:
                    row = rpc[(code, resp)] = [0.0] * (len(buckets) + 1)
                for i, b in enumerate(buckets):
                    row[i] += b
                row[-1] += total
            for t, g, m, b in p.get("out", ()):
                row = out.get((t, g))
                if row is None:
                    row = out[(t, g)] = [0, 0]
                row[0] += m
                row[1] += b
        return puts, rpc, out, pulled

    def forget(self, live_topics) -> None:
        """Drop the pulled offsets of topics that no longer exist (their series are gone)."""
        with self._lock:
            for k in [k for k in self.pulled if k[0] not in live_topics]:
                del self.pulled[k]
