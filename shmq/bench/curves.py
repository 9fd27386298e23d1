"""Scaling curves (``shmq-bench curve <name>``): one figure swept over a range of points, each
point measured on its own, printed as one table, written as JSON (schema shmq-bench-curve/1)
and drawn as a PNG (curve_plot.py).

A curve is a ``CurveSpec``: its swept values (``points``, and two tiny ``quick`` ones the
tests run), one or more ``series`` (e.g. local and TCP), and ``measure(ctx, series, x)``,
which returns the ``Point`` (or points) measured at ``x``. The curves live in the modules of
``CURVE_MODULES`` (each exports ``CURVES``, a list of specs); a new curve is one more spec in
one more module there. Scenario curves (message size, producers, consumer groups) measure a
point with the ordinary engine run (``scenario_point``); the backlog and memory curves have
their own drivers (backlog.py, memory.py).

Every point is measured once per run; the report carries the load average before and after
(the recording machine is shared), and a point that fails is kept with its status and reason
instead of stopping the curve.
"""
from __future__ import annotations

import importlib
import json
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from typing import Callable

from .runner import Progress, machine

SCHEMA = "shmq-bench-curve/1"

#: modules that export ``CURVES`` (a list of CurveSpec); add yours here
CURVE_MODULES = ("shmq.bench.curve_defs", "shmq.bench.backlog", "shmq.bench.memory", "shmq.bench.queues")

#: the figures a point may carry, with their table headings (extra ones go in ``Point.extra``)
BASE_COLUMNS = (("msgs_per_s", "msgs/s"), ("mb_per_s", "MB/s"), ("p50_us", "p50 µs"), ("p99_us", "p99 µs"))


@dataclass
class Point:
    series: str
    x: float
    label: str
    msgs_per_s: float | None = None
    mb_per_s: float | None = None
    p50_us: float | None = None
    p99_us: float | None = None
    extra: dict = field(default_factory=dict)
    status: str = "ok"        # ok | skipped | error | interrupted
    note: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def value(self, key: str):
        return getattr(self, key) if key in Point.__dataclass_fields__ else self.extra.get(key)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "Point":
        return cls(**{k: v for k, v in d.items() if k in cls.__dataclass_fields__})


@dataclass
class CurveContext:
    """What a measure function gets: the run's Env (servers, temp dirs, cleanup), the
    timing options, and the curve's own options (``opts``: --size, --total, ...)."""
    env: object
    quick: bool = False
    duration: float = 2.0
    warmup: float = 0.5
    rate: float = 0.0
    opts: dict = field(default_factory=dict)
    progress: Progress = field(default_factory=lambda: Progress(enabled=False))

    def say(self, text: str) -> None:
        self.progress.update(text)

    def end_child(self, proc, rx, grace: float = 15) -> None:
        """Reap a measuring child process (SIGKILL after ``grace`` seconds) and close its pipe;
        the Env stops tracking it, so its cleanup does not signal a reused pid."""
        if proc is not None:
            proc.join(grace)
            if proc.is_alive():
                os.kill(proc.pid, signal.SIGKILL)
                proc.join(5)
            self.env.untrack_process(proc.pid)
        rx.close()


@dataclass
class CurveSpec:
    name: str
    title: str
    x_label: str
    points: tuple
    quick: tuple
    measure: Callable[[CurveContext, str, float], "Point | list[Point]"]
    series: tuple = ("local",)
    fmt_x: Callable[[float], str] = lambda x: f"{x:,g}"
    parse_x: Callable[[str], float] = float
    x_log: bool = True
    #: (figure key, axis label, log scale): one plot panel each
    panels: tuple = (("msgs_per_s", "msg/s", True), ("p99_us", "p99 µs", True))
    columns: tuple = BASE_COLUMNS      # (key, heading) in the table, after series and point
    explain: str = ""                  # one paragraph under the table: what a point measures


@dataclass
class CurveReport:
    spec: CurveSpec
    points: list[Point] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    started: float = field(default_factory=time.time)
    elapsed: float = 0.0
    load_before: tuple | None = field(default_factory=lambda: _loadavg())
    load_after: tuple | None = None
    # the command as a user types it: the program by name, not the path it ran from here
    command: list[str] = field(default_factory=lambda: ["shmq-bench", *sys.argv[1:]])

    def to_dict(self) -> dict:
        s = self.spec
        return {"schema": SCHEMA, "curve": s.name, "title": s.title, "x_label": s.x_label,
                "date": _date(self.started), "command": self.command, "machine": machine(),
                "load_average_before": self.load_before, "load_average_after": self.load_after,
                "elapsed_s": round(self.elapsed, 2), "interrupted": self.interrupted,
                "columns": [list(c) for c in s.columns], "points": [p.to_dict() for p in self.points],
                "notes": self.notes}


def _loadavg() -> tuple | None:
    try:
        return tuple(round(v, 2) for v in os.getloadavg())
    except OSError:
        return None


def _date(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


# ============================================================================ registry ==
def all_curves() -> dict[str, CurveSpec]:
    out: dict[str, CurveSpec] = {}
    for mod in CURVE_MODULES:
        for spec in importlib.import_module(mod).CURVES:
            if spec.name in out:
                raise ValueError(f"two curves named {spec.name!r}")
            out[spec.name] = spec
    return out


def get(name: str) -> CurveSpec:
    curves = all_curves()
    if name not in curves:
        raise ValueError(f"unknown curve {name!r} (one of {', '.join(curves)})")
    return curves[name]


def parse_points(spec: CurveSpec, text: str | None, quick: bool) -> list:
    if not text:
        return list(spec.quick if quick else spec.points)
    try:
        return [spec.parse_x(t.strip()) for t in text.split(",") if t.strip()]
    except ValueError as e:
        raise ValueError(f"--points for {spec.name}: {e}") from None


def parse_series(spec: CurveSpec, text: str | None) -> list[str]:
    if not text:
        return list(spec.series)
    names = [t.strip() for t in text.split(",") if t.strip()]
    for n in names:
        if n not in spec.series:
            raise ValueError(f"curve {spec.name} has no series {n!r} (one of {', '.join(spec.series)})")
    return names


# ============================================================================== running ==
def run(spec: CurveSpec, ctx: CurveContext, points: list, series: list[str]) -> CurveReport:
    """Every series at every point, in that order (a series is one line of the plot). Ctrl-C
    stops at once and keeps what was measured."""
    report = CurveReport(spec)
    report.notes += [f"environment: {k}={v}" for k, v in sorted(os.environ.items())
                     if k.startswith("SHMQ_BENCH_") and k != "SHMQ_BENCH_TEST_TAG"]
    t0 = time.monotonic()
    try:
        for s in series:
            for x in points:
                t_point = time.monotonic()
                ctx.say(f"{spec.name} {s} {spec.fmt_x(x)}: starting")
                try:
                    got = spec.measure(ctx, s, x)
                except KeyboardInterrupt:
                    raise
                except Exception as e:  # one point failing does not lose the others
                    got = Point(s, x, spec.fmt_x(x), status="error", note=f"{type(e).__name__}: {e}"[:300])
                for p in got if isinstance(got, list) else [got]:
                    report.points.append(p)
                    ctx.progress.done(f"  [{time.monotonic() - t_point:5.1f} s] {spec.name} {s} {p.label}: "
                                      f"{_one_line(spec, p)}")
                    if p.status == "interrupted":
                        raise KeyboardInterrupt
    except KeyboardInterrupt:
        report.interrupted = True
        ctx.progress.done("interrupted: reporting what was measured")
    report.elapsed = time.monotonic() - t0
    report.load_after = _loadavg()
    return report


def _one_line(spec: CurveSpec, p: Point) -> str:
    if not p.ok:
        return f"{p.status}: {p.note}"
    return ", ".join(f"{head} {fmt(p.value(key))}" for key, head in spec.columns if p.value(key) is not None)


def scenario_point(ctx: CurveContext, series: str, x, label: str, sc, row: str = "shmq") -> Point:
    """Measure one point as an ordinary shmq-bench run of ``sc`` through shmq's ``row``
    ("shmq": the client API; "shmq-store": the store attached directly)."""
    from . import engine
    from .peers import SHMQ
    try:
        r = engine.run(SHMQ[row](), sc, ctx.env, on_progress=lambda t: ctx.say(f"{series} {label}: {t}"))
        status = r.status
    except engine.Interrupted as e:
        r, status = e.result, "interrupted"
    lat = r.latency_us or {}
    p = Point(series, x, label, status="ok" if r.ok and status == "ok" else status, note=r.note)
    if r.ok:
        p.msgs_per_s, p.mb_per_s = r.msgs_per_s, r.mb_per_s
        p.p50_us, p.p99_us = lat.get("p50"), lat.get("p99")
        p.extra["send_per_s"] = r.send_msgs_per_s
        p.extra["cpu_us_per_msg"] = r.cpu_us_per_msg
        if not lat and sc.records_latency and r.messages:
            p.note = (p.note + "; " if p.note else "") + ("no latency: every message the consumers got in the window "
                                                          "was sent (or due, at a fixed rate) before it: they are further behind than the window")
        if r.undelivered and sc.count_mode:
            p.note = (p.note + "; " if p.note else "") + f"{r.undelivered:,} undelivered"
    return p


# ================================================================================ output ==
def fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, str):
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return f"{v:,}"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def table(report: CurveReport) -> str:
    cols = report.spec.columns
    head = ["series", report.spec.x_label] + [h for _, h in cols] + ["note"]
    lines = ["| " + " | ".join(head) + " |", "|---|---:|" + "---:|" * len(cols) + "---|"]
    for p in report.points:
        cells = [p.series, p.label] + [fmt(p.value(k)) if p.ok else "-" for k, _ in cols]
        note = p.note if p.ok else f"{p.status}: {p.note}"
        lines.append("| " + " | ".join(cells + [note.replace("|", "/").strip()]) + " |")
    return "\n".join(lines)


def render(report: CurveReport) -> str:
    m = machine()
    s = report.spec
    out = (f"# shmq-bench curve {s.name}: {s.title}\n# {_date(report.started)}; nproc {m['nproc']}; {m['cpu']}; "
           f"Python {m['python']}; {report.elapsed:.0f} s; load average (1/5/15 min) {_load_text(report.load_before)} "
           f"before, {_load_text(report.load_after)} after" + ("; INTERRUPTED" if report.interrupted else "") + "\n")
    out += table(report) + "\n"
    if s.explain:
        out += "\n" + s.explain + "\n"
    for n in report.notes:
        out += f"- {n}\n"
    return out


def _load_text(load) -> str:
    return "/".join(f"{v:.2f}" for v in load) if load else "?"


def write_json(report: CurveReport, path: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report.to_dict(), f, indent=1)
    os.replace(tmp, path)


def load_json(path: str) -> CurveReport:
    """A written report back (its spec looked up by name: the plot can be redrawn)."""
    with open(path) as f:
        d = json.load(f)
    rep = CurveReport(get(d["curve"]), [Point.from_dict(p) for p in d["points"]], d.get("notes", []),
                      d.get("interrupted", False))
    rep.elapsed = d.get("elapsed_s", 0.0)
    rep.load_before, rep.load_after = d.get("load_average_before"), d.get("load_average_after")
    rep.command = d.get("command", [])
    return rep
