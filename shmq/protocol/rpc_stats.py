"""Per-request-code latency counts for ``rocketmq_rpc_latency``, kept by whoever serves
remoting requests (broker workers, the NameServer) and read by their metrics exporters.

Why plain counters and not a prometheus_client Histogram here: a broker worker is a separate
process from the exporter (the supervisor), so what it counts must travel as data; and the
wrapper sits in front of every request, so it does the least that can be done: one
``perf_counter`` pair, one bisect and two additions. The buckets are RocketMQ 5's
(``le_1_ms`` ... ``le_3_s``, then overflow); the unit is milliseconds, as RocketMQ's.

:func:`wrap` returns handlers that time the wrapped ones; a handler's answer (direct or
awaited) is returned unchanged, and an exception still reaches the transport (which turns it
into SYSTEM_ERROR), counted as response code 1.
"""
from __future__ import annotations

import inspect
import time
from bisect import bisect_left
from collections.abc import Callable, Mapping

#: Upper bounds of the buckets, in milliseconds (RocketMQ 5's rpc latency buckets).
BOUNDS_MS = (1.0, 3.0, 5.0, 10.0, 100.0, 1000.0, 3000.0)
SYSTEM_ERROR = 1


def cumulative(bounds, counts) -> list[tuple[str, float]]:
    """Non-cumulative bucket counts (one per bound, then overflow) -> the cumulative
    (le, count) pairs of a Prometheus histogram, ``+Inf`` last. Every shmq histogram (rpc
    latency, message size, flush latency) is kept this way and exported through this."""
    out, acc = [], 0.0
    for b, c in zip(bounds, counts):
        acc += c
        out.append((repr(float(b)), acc))
    if len(counts) > len(bounds):
        acc += counts[len(bounds)]
    out.append(("+Inf", acc))
    return out


class RpcStats:
    """(request code, response code) -> [count per bucket ..., overflow, sum of ms]."""

    def __init__(self) -> None:
        self.table: dict[tuple[int, int], list[float]] = {}
        #: called with (request, response) after each answered request (the broker worker
        #: counts messages pulled here, so the pull processor itself is left alone)
        self.on_response: Callable | None = None

    def observe(self, code: int, resp_code: int, ms: float) -> None:
        row = self.table.get((code, resp_code))
        if row is None:
            row = self.table[(code, resp_code)] = [0.0] * (len(BOUNDS_MS) + 2)
        row[bisect_left(BOUNDS_MS, ms)] += 1
        row[-1] += ms

    def rows(self) -> list[list]:
        """[code, response code, [bucket counts (non-cumulative) + overflow], sum ms] each."""
        return [[c, r, row[:-1], row[-1]] for (c, r), row in self.table.items()]

    def wrap(self, handlers: Mapping[int, Callable]) -> dict[int, Callable]:
        return {code: self._timed(code, h) for code, h in handlers.items()}

    def _timed(self, code: int, handler: Callable) -> Callable:
        clock = time.perf_counter
        observe = self.observe

        def done(cmd, resp, t0: float) -> None:
            observe(code, resp.code if resp is not None else 0, (clock() - t0) * 1000.0)
            hook = self.on_response
            if hook is not None and resp is not None:
                hook(cmd, resp)

        async def later(cmd, awaitable, t0: float):
            try:
                resp = await awaitable
            except BaseException:
                observe(code, SYSTEM_ERROR, (clock() - t0) * 1000.0)
                raise
            done(cmd, resp, t0)
            return resp

        def timed(conn, cmd):
            t0 = clock()
            try:
                resp = handler(conn, cmd)
            except BaseException:
                observe(code, SYSTEM_ERROR, (clock() - t0) * 1000.0)
                raise
            if inspect.isawaitable(resp):
                return later(cmd, resp, t0)
            done(cmd, resp, t0)
            return resp

        return timed
