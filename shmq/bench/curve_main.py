"""What ``shmq-bench curve <name>`` does once its arguments are parsed (shmq/cli/bench.py):
pick the curve and its points, run them inside one ``Env`` (which cleans up whatever
happens), print the table, write the JSON and the PNG."""
from __future__ import annotations

import argparse
import os
import signal
import sys

from . import curves
from .main import _terminate
from .runner import Progress
from .services import Env


def list_curves() -> str:
    return "".join(f"{s.name:10} {s.title} (series: {', '.join(s.series)}; points: "
                   f"{', '.join(s.fmt_x(x) for x in s.points)})\n" for s in curves.all_curves().values())


def context(args: argparse.Namespace, env: Env) -> curves.CurveContext:
    quick = bool(args.quick)
    duration = args.duration if args.duration is not None else (0.3 if quick else 2.0)
    warmup = args.warmup if args.warmup is not None else (0.1 if quick else 0.5)
    opts = {k: getattr(args, k) for k in ("size", "total", "connections") if getattr(args, k, None) is not None}
    return curves.CurveContext(env, quick=quick, duration=duration, warmup=warmup, rate=args.rate or 0.0,
                               opts=opts, progress=Progress(enabled=not args.no_progress))


def run_one(spec: curves.CurveSpec, args: argparse.Namespace) -> curves.CurveReport:
    points = curves.parse_points(spec, args.points, args.quick)
    series = curves.parse_series(spec, args.series)
    env = Env(workers=args.workers, keep=args.keep, dir=args.dir)
    try:
        report = curves.run(spec, context(args, env), points, series)
    finally:
        env.close()
    if args.keep:
        report.notes.append(f"kept: {env.root}")
    return report


def outputs(spec: curves.CurveSpec, args: argparse.Namespace) -> tuple[str | None, str | None]:
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        base = os.path.join(args.out, f"curve-{spec.name}")
        return args.json or f"{base}.json", args.plot or f"{base}.png"
    return args.json, args.plot


def run(args: argparse.Namespace) -> int:
    if args.name == "list":
        sys.stdout.write(list_curves())
        return 0
    specs = list(curves.all_curves().values()) if args.name == "all" else [curves.get(args.name)]
    if len(specs) > 1 and (args.json or args.plot or args.points):
        raise ValueError("curve all: give --out DIR (one JSON and PNG per curve), not --json/--plot/--points")
    signal.signal(signal.SIGTERM, _terminate)  # a kill: stop like Ctrl-C, so cleanup runs
    code = 0
    for spec in specs:
        report = run_one(spec, args)
        sys.stdout.write(curves.render(report) + "\n")
        sys.stdout.flush()
        js, png = outputs(spec, args)
        if js:
            curves.write_json(report, js)
        if png:
            from . import curve_plot
            curve_plot.write(report, png)
        if report.interrupted:
            return 130
    return code
