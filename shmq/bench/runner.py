"""Runs scenarios through shmq's rows and the peers, prints one table, writes JSON and a plot.

``run(scenarios, peers, ...)`` is what ``shmq-bench`` calls; with no scenario given it runs
``scenarios.standard_suite()``. Peers do not depend on ``--transport``, so in a scenario that
differs from an earlier one only by transport their earlier figures are reused (said so in
the table) instead of measured twice.
"""
from __future__ import annotations

import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field

from . import engine
from .peers import PEERS, SHMQ, Peer
from .scenarios import SCHEMA, Result, Scenario, with_
from .services import Env


@dataclass
class Report:
    scenarios: list[Scenario]
    results: list[Result] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    interrupted: bool = False
    started: float = field(default_factory=time.time)
    elapsed: float = 0.0
    command: list[str] = field(default_factory=lambda: list(sys.argv))
    cleanup: dict = field(default_factory=dict)
    load_before: float | None = field(default_factory=lambda: _load())

    def rows(self, sc: Scenario) -> list[Result]:
        return [r for r in self.results if r.scenario == sc]

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started)),
                "command": self.command, "machine": machine() | {"load_average_1m_before": self.load_before},
                "elapsed_s": round(self.elapsed, 2),
                "interrupted": self.interrupted, "scenarios": [s.to_dict() | {"label": s.label} for s in self.scenarios],
                "results": [r.to_dict() for r in self.results], "notes": self.notes, "cleanup": self.cleanup}


def _load() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return None


def machine() -> dict:
    model = "unknown CPU"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {"nproc": os.cpu_count(), "cpu": model, "python": platform.python_version(),
            "system": f"{platform.system()} {platform.release()}", "load_average_1m": _load()}


class Progress:
    """A live status line on stderr when it is a terminal; otherwise one line per finished run."""

    def __init__(self, stream=None, enabled: bool = True):
        self.stream = stream or sys.stderr
        self.live = enabled and self.stream.isatty()
        self.enabled = enabled
        self._width = 0

    def update(self, text: str) -> None:
        if self.live:
            line = text[:120]
            self.stream.write("\r" + line.ljust(self._width))
            self._width = len(line)
            self.stream.flush()

    def done(self, text: str) -> None:
        if not self.enabled:
            return
        if self.live:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()


def run(scenarios: list[Scenario], peer_names: list[str], env: Env, *, shmq_rows: list[str] | None = None,
        progress: Progress | None = None) -> Report:
    """Every scenario through shmq's rows, then each peer. Ctrl-C stops at once and returns
    what was measured (``report.interrupted``)."""
    report = Report(scenarios)
    progress = progress or Progress()
    rows: list[type[Peer]] = [SHMQ[n] for n in (shmq_rows if shmq_rows is not None else list(SHMQ))]
    rows += [PEERS[n] for n in peer_names]
    measured: dict[tuple, Result] = {}
    t0 = time.monotonic()
    try:
        for sc in scenarios:
            for cls in rows:
                key = (cls.name, _transport_free(sc))
                if not cls.is_shmq and key in measured:
                    prev = measured[key]
                    r = Result.from_dict(prev.to_dict())
                    r.scenario = sc
                    r.note = (prev.note + "; " if prev.note else "") + "peer measured once for both transports"
                    report.results.append(r)
                    continue
                peer = cls()
                progress.update(f"{sc.label}: {peer.name} starting")
                t_run = time.monotonic()
                try:
                    r = engine.run(peer, sc, env, on_progress=lambda s, lab=sc.label: progress.update(f"{lab}: {s}"))
                except engine.Interrupted as e:
                    report.results.append(e.result)
                    raise KeyboardInterrupt from None
                report.results.append(r)
                measured[key] = r
                progress.done(f"  [{time.monotonic() - t_run:4.1f} s] {sc.label}: {_one_line(r)}")
    except KeyboardInterrupt:
        report.interrupted = True
        progress.done("interrupted: reporting what was measured")
    report.elapsed = time.monotonic() - t0
    for cls in rows:
        report.notes.append(f"{cls.name}: {cls.description}")
    return report


def _transport_free(sc: Scenario) -> tuple:
    return tuple(sorted(with_(sc, transport="local").to_dict().items()))


def _one_line(r: Result) -> str:
    if not r.ok:
        return f"{r.peer} {r.status}: {r.note}"
    lat = r.latency_us
    s = f"{r.peer} {r.msgs_per_s:,.0f} msgs/s"
    if lat:
        s += f", p50 {lat['p50']:.1f} µs, p99 {lat['p99']:.1f} µs"
    return s


# ============================================================================ the table ==
def _fmt_num(v, digits=0) -> str:
    if v is None:
        return "-"
    if digits == 0:
        return f"{v:,.0f}"
    return f"{v:,.{digits}f}"


def _fmt_us(v) -> str:
    if v is None:
        return "-"
    if v < 10:
        return f"{v:.2f}"
    if v < 1000:
        return f"{v:.1f}"
    return f"{v:,.0f}"


def references(rows: list[Result]) -> list[Result]:
    """The shmq rows the ratios are taken against: the client's and the store's, where measured."""
    by = {r.peer: r for r in rows}
    return [by[n] for n in ("shmq", "shmq-store") if n in by and by[n].ok and by[n].msgs_per_s]


def ratio(refs: list[Result], r: Result) -> str:
    """shmq/peer, for the client row ("shmq") and the store row ("store"): the throughput
    ratio (higher is better for shmq) for throughput scenarios; p50 and p99 latency ratios
    (lower is better for shmq) for e2e."""
    if not r.ok or r.peer in SHMQ_NAMES:
        return ""
    out = []
    for ref in refs:
        who = "shmq" if ref.peer == "shmq" else "store"
        if r.scenario.kind == "e2e":
            a, b = ref.latency_us, r.latency_us
            if a and b:
                out.append(f"{who} p50 {_x(a['p50'] / max(b['p50'], 1e-9))} p99 {_x(a['p99'] / max(b['p99'], 1e-9))}")
        elif r.msgs_per_s:
            out.append(f"{who} {_x(ref.msgs_per_s / r.msgs_per_s)}")
    return ", ".join(out)


def _x(v: float) -> str:
    if v >= 100:
        return f"{v:,.0f}x"
    if v >= 0.01:
        return f"{v:.2f}x"
    return "<0.01x"


SHMQ_NAMES = {cls.name for cls in SHMQ.values()}

COLUMNS = ("scenario", "system", "msgs/s", "MB/s", "send/s", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs",
           "p99.99 µs", "max µs", "CPU µs/msg prod/cons/broker", "shmq/peer", "note")


def table(report: Report) -> str:
    """One Markdown table: every scenario, shmq's rows first, then the peers."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" if i < 2 or c == "note" else "---:"
                                                               for i, c in enumerate(COLUMNS)) + "|"]
    for sc in report.scenarios:
        rows = report.rows(sc)
        if not rows:
            continue
        refs = references(rows)
        short = f"{sc.kind} {sc.transport}" if sc.kind != "pull" else sc.kind
        for r in rows:
            lat = r.latency_us or {}
            cpu = r.cpu_us_per_msg or {}
            cpu_s = "/".join(_fmt_us(cpu.get(k)) for k in ("producer", "consumer", "broker")) if r.ok else ""
            note = r.note if r.status == "ok" else f"{r.status}: {r.note}"
            if r.ok and r.undelivered and sc.count_mode:
                note += f" {r.undelivered:,} undelivered"
            if r.ok and sc.durable and r.ack_latency_us:
                a = r.ack_latency_us
                note = f"send answered p50 {_fmt_us(a['p50'])} µs, p99 {_fmt_us(a['p99'])} µs" + (f"; {note}" if note else "")
            cells = [short, r.peer,
                     _fmt_num(r.msgs_per_s) if r.ok else "-", _fmt_num(r.mb_per_s, 1) if r.ok else "-",
                     _fmt_num(r.send_msgs_per_s) if r.ok else "-",
                     *(_fmt_us(lat.get(k)) for k in ("p50", "p90", "p99", "p99.9", "p99.99", "max")),
                     cpu_s, ratio(refs, r), note.replace("|", "/").strip()]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def render(report: Report) -> str:
    m = machine()
    head = [f"# shmq-bench {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(report.started))}; "
            f"nproc {m['nproc']}; {m['cpu']}; Python {m['python']}; {report.elapsed:.0f} s; "
            f"load average {report.load_before} before, {m['load_average_1m']:.2f} after"
            + ("; INTERRUPTED" if report.interrupted else "")]
    for sc in report.scenarios:
        head.append(f"# {sc.label}")
    out = "\n".join(head) + "\n" + table(report) + "\n"
    out += ("\nmsgs/s: delivered to consumers per second in the measured window (after warm-up); send/s: the "
            "producers' own rate. Latency: send -> consumer, from each message's intended send time at a fixed "
            "rate (coordinated omission corrected); for sync-flush the note gives the send call's own latency (answered "
            "once on disk). shmq/peer: throughput ratio of the client row (shmq) and "
            "the store row (store) to the peer; for e2e the latency ratios (below 1: shmq is faster).\n")
    for n in report.notes:
        out += f"- {n}\n"
    return out


def write_json(report: Report, path: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        json.dump(report.to_dict(), f, indent=1)
    os.replace(tmp, path)


def load_json(path: str) -> Report:
    with open(path) as f:
        d = json.load(f)
    scs = [Scenario.from_dict(s) for s in d["scenarios"]]
    rep = Report(scs, [Result.from_dict(r) for r in d["results"]], d.get("notes", []), d.get("interrupted", False))
    rep.elapsed = d.get("elapsed_s", 0.0)
    rep.load_before = d.get("machine", {}).get("load_average_1m_before")
    rep.command = d.get("command", [])
    try:
        import calendar
        rep.started = calendar.timegm(time.strptime(d["date"], "%Y-%m-%d %H:%M:%S UTC"))
    except (KeyError, ValueError):
        pass
    return rep
