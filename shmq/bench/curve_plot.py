"""A curve as a small PNG (matplotlib, Agg backend): one panel per figure of the spec
(``CurveSpec.panels``: throughput, p99, ...), the swept value on the x axis, one line per
series in the palette's colours (shmq.palette: the same ones as shmq-bench --plot and the
dashboard). Points that did not measure are left out of the line (the table says why).
"""
from __future__ import annotations

from shmq import palette

from .curves import CurveReport


def write(report: CurveReport, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = report.spec
    panels = spec.panels
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4), dpi=72, squeeze=False)
    series = list(dict.fromkeys(p.series for p in report.points))
    xs_all = sorted({p.x for p in report.points})
    for ax, (key, label, log) in zip(axes[0], panels):
        drawn, positive = False, True
        for i, s in enumerate(series):
            pts = [p for p in report.points if p.series == s and p.ok and isinstance(p.value(key), (int, float))]
            if not pts:
                continue
            ax.plot([p.x for p in pts], [p.value(key) for p in pts], marker="o", markersize=3.5, linewidth=1.5,
                    color=palette.color(i), label=s)
            drawn = True
            positive = positive and all(p.value(key) > 0 for p in pts)
        if spec.x_log:
            ax.set_xscale("log")
        log = log and drawn and positive  # a log axis cannot show a zero or negative growth
        if log:
            ax.set_yscale("log")
        if xs_all:
            ax.set_xticks(xs_all)
            ax.set_xticklabels([spec.fmt_x(x) for x in xs_all], fontsize=7, rotation=45 if len(xs_all) > 5 else 0)
            ax.tick_params(axis="x", which="minor", bottom=False)
        ax.set_xlabel(spec.x_label, fontsize=8)
        ax.set_ylabel(label + (" (log)" if log else ""), fontsize=8)
        ax.tick_params(axis="y", labelsize=7)
        ax.grid(True, which="major", alpha=0.3, color=palette.GRID)
        if drawn and len(series) > 1:
            ax.legend(fontsize=7)
        if not drawn:
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"shmq-bench curve {spec.name}: {spec.title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
