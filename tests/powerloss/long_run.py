"""The long power-loss run recorded in bench/RESULTS.md (not collected by pytest):

    python -m tests.powerloss.long_run --mode SYNC_FLUSH --crashes 50 --cuts 5 [--seed N] [--broken]

prints one line per crash and a summary, and exits 1 when any cut broke the promise."""
from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from . import harness


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="SYNC_FLUSH", choices=["SYNC_FLUSH", "ASYNC_FLUSH"])
    ap.add_argument("--crashes", type=int, default=20)
    ap.add_argument("--cuts", type=int, default=5)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--seconds", type=float, default=1.5)
    ap.add_argument("--broken", action="store_true")
    ap.add_argument("--keep", default=None, help="directory for the stores (default: a temp dir, removed)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.randrange(1 << 30)
    processes: list = []
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="pl-", dir=a.keep) as tmp:
        try:
            for n in range(a.crashes):
                d = Path(tmp) / f"r{n}"
                d.mkdir()
                got = harness.run(processes, d, a.mode, crashes=1, cuts=a.cuts, seed=seed + n,
                                  seconds=a.seconds, broken=a.broken)
                outcomes += got
                bad = [o for o in got if not o.ok]
                print(f"crash {n} (seed {seed + n}): {harness.summary(got)}", flush=True)
                for o in bad:
                    print("  FAIL", json.dumps({"seed": o.seed, "started": o.started, "acked_lost": o.acked_lost[:10],
                                                "garbage": [repr(g) for g in o.garbage[:3]], "problems": o.problems[:10],
                                                "image": o.image}), flush=True)
                for p in processes:
                    p.stop()
                processes.clear()
        finally:
            for p in processes:
                p.stop()
    print(f"seed {seed}, mode {a.mode}: {harness.summary(outcomes)}")
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
