"""``shmq chaos``: kill -9 loops against a broker under load, then the count of what was lost.

    shmq chaos --cycles 20 --seconds 60 --flush both --json chaos.json

Argument parsing and output only; the run is :mod:`shmq.chaos.run`, the verdict
:mod:`shmq.chaos.check`. Prints one summary line per flush mode; exits 1 when an
acknowledged message was lost, garbage was served, the store did not verify or the broker
did not come back (the JSON says which), 2 on bad arguments.
"""
from __future__ import annotations

import argparse
import json
import sys


def _mix(text: str) -> dict:
    from shmq.chaos.run import TARGETS
    out = {t: 0 for t in TARGETS}
    for part in filter(None, text.split(",")):
        name, sep, weight = part.partition("=")
        if name not in out or not sep:
            raise argparse.ArgumentTypeError(f"--mix expects TARGET=WEIGHT,... with targets {', '.join(TARGETS)}")
        out[name] = float(weight)
    return out


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("chaos", help="kill -9 loops against a broker under load; count what was lost",
                       description="Starts a NameServer and a broker (and slaves) on temporary stores, runs TCP "
                                   "and local producers and consumers, kills producers, workers, the supervisor "
                                   "or the whole broker at random, then checks every acknowledged message.")
    p.add_argument("--cycles", type=int, default=20, help="kill cycles per flush mode (default 20)")
    p.add_argument("--seconds", type=float, default=120.0, help="time budget per flush mode, after each target's first kill (default 120)")
    p.add_argument("--flush", choices=("ASYNC_FLUSH", "SYNC_FLUSH", "both"), default="both")
    p.add_argument("--slaves", type=int, default=0, help="slaves of the broker (a kill target too)")
    p.add_argument("--master-role", choices=("SYNC_MASTER", "ASYNC_MASTER"), default="SYNC_MASTER",
                   help="the master's role when --slaves > 0 (default SYNC_MASTER)")
    p.add_argument("--workers", type=int, default=2, help="broker workers (default 2)")
    p.add_argument("--seed", type=int, default=None, help="random seed (default: drawn and printed)")
    p.add_argument("--mix", type=_mix, default=None,
                   help="target weights, e.g. producer=3,worker=3,supervisor=1,broker=1,slave=1 (the default)")
    p.add_argument("--tcp-producers", type=int, default=1)
    p.add_argument("--local-producers", type=int, default=1)
    p.add_argument("--rate", type=float, default=100.0, help="sends per second per producer (default 100)")
    p.add_argument("--json", metavar="FILE", help="write the full report here")
    p.add_argument("--keep", action="store_true", help="keep the temporary stores and logs")
    p.add_argument("--progress", type=int, default=0, metavar="N", help="a progress line on stderr every N cycles")
    return p


def run(args: argparse.Namespace) -> int:
    import random

    from shmq.bench.services import ServiceUnavailable
    from shmq.chaos import check
    from shmq.chaos.run import Options, run_mode
    if args.cycles < 0 or args.seconds <= 0 or args.slaves < 0 or args.workers < 1:
        print("shmq chaos: --cycles >= 0, --seconds > 0, --slaves >= 0 and --workers >= 1", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.randrange(1 << 31)
    opts = Options(cycles=args.cycles, seconds=args.seconds, slaves=args.slaves, master_role=args.master_role,
                   workers=args.workers, seed=seed, tcp_producers=args.tcp_producers,
                   local_producers=args.local_producers, rate=args.rate, keep=args.keep,
                   progress=args.progress)
    if args.mix:
        opts.mix = args.mix
    modes = ["ASYNC_FLUSH", "SYNC_FLUSH"] if args.flush == "both" else [args.flush]
    reports = []
    for flush in modes:
        try:
            rep = run_mode(flush, opts)
        except ServiceUnavailable as e:
            print(f"shmq chaos: {e}", file=sys.stderr)
            return 1
        reports.append(rep)
        print(check.summary(rep) + f" (seed {seed})", flush=True)
        if args.json:   # after each mode: a long run cut short keeps the modes it finished
            with open(args.json, "w") as f:
                json.dump({"seed": seed, "runs": reports}, f, indent=1)
    return 0 if all(check.ok(r) for r in reports) else 1
