"""Worker side of the broker metrics (the supervisor side is ``shmq.broker.supervisor.metrics``): counts kept in plain dicts (no locks, no Prometheus
objects: one worker is one event loop) and pushed, cumulative, to the supervisor.

Pulled messages are counted from the PULL_MESSAGE answers (the records in the body), not in
the pull processor, so the data path carries no metrics code; the rpc timing wrapper
(:mod:`shmq.protocol.rpc_stats`) hands every answer to :meth:`WorkerStats.on_response`.
"""
from __future__ import annotations

import json
import logging
import struct

from shmq.protocol import RequestCode, ResponseCode
from shmq.protocol.rpc_stats import RpcStats
from shmq.service import AsyncService

log = logging.getLogger("shmq.broker.metrics")

_I32 = struct.Struct(">i")
_PULL = int(RequestCode.PULL_MESSAGE)
_OK = int(ResponseCode.SUCCESS)


def count_records(body: bytes) -> int:
    """Records in a pull body (each starts with its TOTALSIZE)."""
    n = pos = 0
    end = len(body)
    while pos + 4 <= end:
        size = _I32.unpack_from(body, pos)[0]
        if size <= 0:
            break
        pos += size
        n += 1
    return n


class WorkerStats:
    def __init__(self) -> None:
        self.rpc = RpcStats()
        self.rpc.on_response = self.on_response
        #: (topic, group) -> [messages, bytes] pulled
        self.out: dict[tuple[str, str], list[int]] = {}
        #: (topic, group, queue id) -> the highest nextBeginOffset answered
        self.pulled: dict[tuple[str, str, int], int] = {}
        self._sent_pulled: dict[tuple[str, str, int], int] = {}

    def on_response(self, cmd, resp) -> None:
        if cmd.code != _PULL or resp.code != _OK:
            return
        ext = cmd.ext_fields
        topic, group = ext.get("topic", ""), ext.get("consumerGroup", "")
        row = self.out.get((topic, group))
        if row is None:
            row = self.out[(topic, group)] = [0, 0]
        row[0] += count_records(resp.body)
        row[1] += len(resp.body)
        try:
            key = (topic, group, int(ext.get("queueId", -1)))
            nxt = int(resp.ext_fields.get("nextBeginOffset", -1))
        except ValueError:
            return
        if nxt > self.pulled.get(key, -1):
            self.pulled[key] = nxt

    def snapshot(self, puts: int) -> bytes:
        """The cumulative counts as JSON. Pulled offsets are sent when they moved since the
        last push (the supervisor keeps the last one of each queue), so a push stays small
        with thousands of idle groups."""
        moved = [[t, g, q, o] for (t, g, q), o in self.pulled.items() if self._sent_pulled.get((t, g, q)) != o]
        self._sent_pulled.update(((t, g, q), o) for t, g, q, o in moved)
        return json.dumps({"puts": puts, "rpc": self.rpc.rows(),
                           "out": [[t, g, m, b] for (t, g), (m, b) in self.out.items()],
                           "pulled": moved}).encode()


class MetricsPush(AsyncService):
    """Every ``interval_s``: ``send(snapshot)`` (a oneway control message to the supervisor)."""

    def __init__(self, stats: WorkerStats, send, puts, interval_s: float):
        super().__init__("shmq-metrics-push", interval_s, log=log)
        self.stats = stats
        self.send = send
        self.puts = puts

    def run_once(self) -> None:
        self.send(self.stats.snapshot(self.puts()))
