"""PNG charts of a report (matplotlib, Agg backend: no display needed).

Left: the latency percentile spectrum (HdrHistogram's "latency by percentile" chart: the
x axis is 1 / (1 - percentile), so p90, p99, p99.9, p99.99 are evenly spaced) of shmq and
each peer for the first scenario that recorded latency, one line per system, log-scale µs
(shmq's rows of the same scenario over the other transport dashed).
Right: throughput bars (msgs/s, log scale) per throughput scenario and system.
"""
from __future__ import annotations

from dataclasses import replace

from shmq import palette

from . import histogram
from .runner import SHMQ_NAMES, Report

PCT_TICKS = (0.0, 90.0, 99.0, 99.9, 99.99, 99.999)


def _latency_scenario(report: Report):
    for sc in report.scenarios:
        if sc.kind == "e2e" and any(r.histogram for r in report.rows(sc)):
            return sc
    for sc in report.scenarios:
        if any(r.histogram for r in report.rows(sc)):
            return sc
    return None


def colors_of(names) -> dict[str, str]:
    """One colour per system, the same in both panels: shmq's rows get palette.SHMQ, the
    peers the next palette colours in the order they first appear (as on the dashboard)."""
    out: dict[str, str] = {}
    k = 1
    for n in names:
        if n in out:
            continue
        if n in SHMQ_NAMES or n.startswith("shmq"):
            out[n] = palette.SHMQ
        else:
            out[n] = palette.color(k)
            k += 1
    return out


def write(report: Report, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6), dpi=80)
    colors = colors_of(r.peer for s in report.scenarios for r in report.rows(s))
    sc = _latency_scenario(report)
    if sc is not None:
        for r in report.rows(sc):
            if not r.histogram:
                continue
            pts = histogram.spectrum_us(histogram.decode(r.histogram))
            xs = [1.0 / max(1.0 - p / 100.0, 1e-6) for p, _ in pts]
            ax1.plot(xs, [v for _, v in pts], label=r.peer, color=colors.get(r.peer),
                     linewidth=1.6 if r.peer.startswith("shmq") else 1.1)
        for other in report.scenarios:  # the same scenario over TCP: shmq's rows, dashed
            if other is sc or other.kind != sc.kind or other.transport == sc.transport:
                continue
            if replace(other, transport=sc.transport) != sc:
                continue
            for r in report.rows(other):
                if r.histogram and r.peer in SHMQ_NAMES:
                    pts = histogram.spectrum_us(histogram.decode(r.histogram))
                    ax1.plot([1.0 / max(1.0 - p / 100.0, 1e-6) for p, _ in pts], [v for _, v in pts],
                             linestyle="--", linewidth=1.3, color=colors.get(r.peer), label=f"{r.peer} ({other.transport})")
        ax1.set_xscale("log")
        ax1.set_yscale("log")
        ax1.set_xticks([1.0 / (1.0 - p / 100.0) for p in PCT_TICKS])
        ax1.set_xticklabels([f"{p:g}%" for p in PCT_TICKS])
        ax1.set_xlim(1, 1e5)
        ax1.set_xlabel("percentile")
        ax1.set_ylabel(f"latency {palette.UNITS['latency']} (log)")
        ax1.set_title(f"latency by percentile\n{sc.label}", fontsize=9)
        ax1.grid(True, which="both", alpha=0.3)
        ax1.legend(fontsize=8)
    else:
        ax1.text(0.5, 0.5, "no latency recorded", ha="center", va="center")
        ax1.set_axis_off()

    groups = [s for s in report.scenarios if s.kind != "e2e" and any(r.ok for r in report.rows(s))]
    systems: list[str] = []
    for s in groups:
        for r in report.rows(s):
            if r.ok and r.peer not in systems:
                systems.append(r.peer)
    width = 0.8 / max(len(systems), 1)
    for k, name in enumerate(systems):
        xs, ys = [], []
        for i, s in enumerate(groups):
            r = next((r for r in report.rows(s) if r.peer == name and r.ok), None)
            if r is not None and r.msgs_per_s:
                xs.append(i + k * width)
                ys.append(r.msgs_per_s)
        ax2.bar(xs, ys, width, label=name, color=colors.get(name))
    ax2.set_xticks([i + 0.4 - width / 2 for i in range(len(groups))])
    ax2.set_xticklabels([f"{s.kind} {s.transport}" if s.kind != "pull" else s.kind for s in groups], fontsize=8)
    ax2.set_yscale("log")
    ax2.set_ylabel(f"{palette.UNITS['rate']} (log)")
    ax2.set_title(f"throughput ({groups[0].size if groups else '?'} B messages)", fontsize=9)
    ax2.grid(True, axis="y", which="both", alpha=0.3)
    if systems:
        ax2.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
