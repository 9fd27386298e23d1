#!/usr/bin/env python3
"""Two trees' TCP consumer rows alternated (A, B, A, B, ...), medians at the end: the paced
e2e rows of ``bench/tcp_paths.py`` (``shmq-bench e2e --transport tcp``, async / oneway / sync
sends, 10,000 msgs/s) and its sync ``send()`` + PushConsumer row (``bench/tcp_consumer_row.py``).

    flock /tmp/shmq-bench.lock .venv/bin/python bench/tcp_pairs.py A_TREE B_TREE [--pairs 3]
        [--modes async,oneway] [--consumer-row] [--duration 3]

Each run is its tree's own code (cwd and PYTHONPATH the tree, this interpreter): build each
tree's C core in place first. One run holds the machine for ~10 s; the caller takes the bench
lock around the whole script. Prints each run as it ends and a table of medians."""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def e2e(tree: str, mode: str, duration: float) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        subprocess.run([sys.executable, "-m", "shmq.cli.bench", "e2e", "--transport", "tcp", "--peers", "none",
                        "--shmq", "shmq", "--send-mode", mode, "--duration", str(duration), "--no-progress",
                        "--json", f.name], cwd=tree, env={**os.environ, "PYTHONPATH": tree},
                       capture_output=True, text=True)
        try:
            r = json.load(open(f.name))["results"][0]
        except (OSError, ValueError, KeyError, IndexError):
            return {}
    lu, cpu = r.get("latency_us") or {}, r.get("cpu_us_per_msg") or {}
    return {"delivered": r.get("msgs_per_s") or 0, "p50": lu.get("p50"), "p99": lu.get("p99"),
            "cpu": f"{cpu.get('producer')}/{cpu.get('consumer')}/{cpu.get('broker')}"}


def consumer_row(tree: str, duration: float) -> dict:
    here = os.path.dirname(os.path.abspath(__file__))  # this tree's script, over the run tree's code (its cwd)
    out = subprocess.run([sys.executable, os.path.join(here, "tcp_consumer_row.py"), "0", "1", str(duration)],
                         cwd=tree, env={**os.environ, "PYTHONPATH": tree}, capture_output=True, text=True).stdout
    m = re.search(r" ([\d,]+)/s p50 (\d+) µs.*?\(([\d.]+) per pull\); (.*)$", out, re.M)
    if not m:
        return {}
    return {"rate": float(m.group(1).replace(",", "")), "p50": int(m.group(2)), "per_pull": float(m.group(3)),
            "cpu": m.group(4)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--pairs", type=int, default=3)
    ap.add_argument("--modes", default="async,oneway")
    ap.add_argument("--consumer-row", action="store_true")
    ap.add_argument("--duration", type=float, default=3.0)
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    res: dict[tuple[str, str], list[dict]] = {}
    for i in range(a.pairs):
        for tree in (a.a, a.b):
            for mode in modes:
                r = e2e(tree, mode, a.duration)
                res.setdefault((tree, mode), []).append(r)
                print(f"{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f} {tree} e2e {mode}: {r}", flush=True)
            if a.consumer_row:
                r = consumer_row(tree, a.duration)
                res.setdefault((tree, "consumer row"), []).append(r)
                print(f"{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f} {tree} consumer row: {r}", flush=True)
    print("| row | tree | runs | median |")
    print("|---|---|---|---:|")
    for (tree, row), rs in res.items():
        key = "rate" if row == "consumer row" else "p50"
        vals = [r[key] for r in rs if r.get(key) is not None]
        shown = "; ".join(str(round(v)) for v in vals)
        med = f"{statistics.median(vals):,.0f}" if vals else "-"
        print(f"| {row} ({'msgs/s' if key == 'rate' else 'p50 µs'}) | {tree} | {shown} | {med} |")


if __name__ == "__main__":
    main()
