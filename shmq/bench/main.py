"""What ``shmq-bench`` does once its arguments are parsed (shmq/cli/bench.py): build the
scenarios, run them inside an ``Env`` (which cleans up whatever happens), print the table,
write the JSON and the plot."""
from __future__ import annotations

import argparse
import signal
import sys

from . import scenarios
from .peers import DEFAULT_PEERS, PEERS, SHMQ
from .runner import Progress, Report, render, run as run_all, write_json
from .services import Env

SCENARIO_OPTIONS = ("transport", "size", "batch", "producers", "consumers", "rate", "duration", "warmup", "count",
                    "send_mode", "send_window")


def build_scenarios(args: argparse.Namespace) -> list[scenarios.Scenario]:
    given = {k: getattr(args, k) for k in SCENARIO_OPTIONS if getattr(args, k, None) is not None}
    if args.scenario:
        if args.quick:
            given.setdefault("duration", 0.3)
            given.setdefault("warmup", 0.1)
            if args.scenario == "pull":
                given.setdefault("count", 5000)
        return [scenarios.make(args.scenario, **given)]
    suite = scenarios.standard_suite(quick=args.quick)
    given.pop("transport", None)  # the suite runs both
    return [scenarios.with_(sc, **given) for sc in suite] if given else suite


def parse_list(text: str | None, default, known) -> list[str]:
    if text is None:
        return list(default)
    names = [n.strip().lower() for n in text.split(",") if n.strip()]
    if names == ["none"]:
        return []
    for n in names:
        if n not in known:
            raise ValueError(f"unknown name {n!r} (one of {', '.join(known)})")
    return names


def _terminate(signum, frame) -> None:
    raise KeyboardInterrupt


def run(args: argparse.Namespace) -> int:
    scs = build_scenarios(args)
    peers = parse_list(args.peers, DEFAULT_PEERS, PEERS)
    shmq_rows = parse_list(args.shmq, SHMQ, SHMQ)
    progress = Progress(enabled=not args.no_progress)
    signal.signal(signal.SIGTERM, _terminate)  # a kill: stop like Ctrl-C, so cleanup runs
    env = Env(workers=args.workers, keep=args.keep)
    report: Report
    try:
        report = run_all(scs, peers, env, shmq_rows=shmq_rows, progress=progress)
    finally:
        env.close()
    report.cleanup = env.inventory
    if args.keep:
        report.notes.append(f"kept: {env.root}")
    sys.stdout.write(render(report))
    sys.stdout.flush()
    if args.json:
        write_json(report, args.json)
    if args.plot:
        from . import plot
        plot.write(report, args.plot)
    return 130 if report.interrupted else 0
