"""The scenario curves: message size, producer processes, consumer groups. Each point is an
ordinary shmq-bench run (engine.py) through the public client (``Producer`` ->
``PushConsumer``), over the local path (shared memory) or TCP (the series), against one
broker that the curve starts once: ``produce`` (as fast as the producers can, throughput and
the latency that queueing gives) or, with ``--rate``, ``e2e`` at that fixed total rate
(latency from each message's intended send time).
"""
from __future__ import annotations

import re

from . import scenarios
from .curves import CurveContext, CurveSpec, Point, scenario_point

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30}


def parse_bytes(text: str) -> int:
    """"100", "4K", "4 KiB", "1M", "10G" -> bytes (powers of two)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"not a size: {text!r} (e.g. 100, 4K, 1M)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def fmt_bytes(n: float) -> str:
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if n >= div:
            v = n / div
            return f"{v:g} {unit}" if v == int(v) else f"{v:.3g} {unit}"
    return f"{int(n)} B"


def _int(text: str) -> int:
    return int(text)


QUICK_COUNT = 300


def scenario_for(ctx: CurveContext, series: str, **kw) -> scenarios.Scenario:
    kind = "e2e" if ctx.rate else "produce"
    kw.setdefault("size", ctx.opts.get("size") or 100)
    if ctx.quick and not ctx.rate:
        # a fixed count, not a window: on a loaded machine a 0.3 s window can close before a
        # TCP consumer's first rebalance, and the point would show nothing delivered
        kw["count"] = QUICK_COUNT
    return scenarios.make(kind, transport=series, duration=ctx.duration, warmup=ctx.warmup,
                          rate=ctx.rate or None, **kw)


def measure_size(ctx: CurveContext, series: str, x) -> Point:
    sc = scenario_for(ctx, series, size=int(x))
    return scenario_point(ctx, series, x, fmt_bytes(x), sc)


def measure_producers(ctx: CurveContext, series: str, x) -> Point:
    sc = scenario_for(ctx, series, producers=int(x))
    return scenario_point(ctx, series, x, str(int(x)), sc)


def measure_groups(ctx: CurveContext, series: str, x) -> Point:
    g = int(x)
    sc = scenario_for(ctx, series, consumers=g, groups=g)
    p = scenario_point(ctx, series, x, str(g), sc)
    if p.ok and p.msgs_per_s is not None:
        p.extra["per_group"] = p.msgs_per_s / g
    return p


_EXPLAIN = ("Each point: shmq-bench `{kind}` through Producer -> PushConsumer (one broker for the whole curve, "
            "a fresh topic per point), {win}. sent/s: the producers' own rate; delivered/s (msgs/s): to consumers per second "
            "in the measured window; p50/p99: send -> consumer latency (unpaced: the queueing delay at full speed).")

_SEND_COLUMNS = (("send_per_s", "sent/s"), ("msgs_per_s", "delivered/s"), ("mb_per_s", "MB/s delivered"),
                 ("p50_us", "p50 µs"), ("p99_us", "p99 µs"))

CURVES = [
    CurveSpec(
        name="size", title="throughput and latency against message size, 1 producer -> 1 consumer",
        x_label="message size", points=(100, 1 << 10, 4 << 10, 16 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20),
        quick=(100, 4 << 10), measure=measure_size, series=("local", "tcp"), fmt_x=fmt_bytes,
        parse_x=parse_bytes, columns=_SEND_COLUMNS,
        panels=(("mb_per_s", "MB/s", True), ("msgs_per_s", "msg/s", True), ("p99_us", "p99 µs", True)),
        explain=_EXPLAIN.format(kind="produce", win="one producer and one consumer process")),
    CurveSpec(
        name="producers", title="throughput and latency against producer processes (-> 1 consumer)",
        x_label="producers", points=(1, 2, 4, 8), quick=(1, 2), measure=measure_producers,
        series=("local", "tcp"), parse_x=_int, columns=_SEND_COLUMNS,
        panels=(("send_per_s", "msg/s sent (all producers)", True), ("msgs_per_s", "msg/s delivered", True),
                ("p99_us", "p99 µs", True)),
        explain=_EXPLAIN.format(kind="produce", win="N producer processes, one consumer process")),
    CurveSpec(
        name="groups", title="consumer groups reading the same topic (1 producer; 1 consumer process per group)",
        x_label="groups", points=(1, 2, 4, 8, 16, 32, 64), quick=(1, 2), measure=measure_groups,
        series=("local", "tcp"), parse_x=_int,
        columns=(("msgs_per_s", "msgs/s (all groups)"), ("per_group", "msgs/s per group"), ("mb_per_s", "MB/s"),
                 ("p50_us", "p50 µs"), ("p99_us", "p99 µs")),
        panels=(("msgs_per_s", "msg/s delivered (all groups)", True), ("per_group", "msg/s per group", True),
                ("p99_us", "p99 µs", True)),
        explain=_EXPLAIN.format(kind="produce", win="one producer; G consumer groups of one process each, "
                                "every group receives every message") + " msgs/s counts every delivery (G per message)."),
]
