#!/usr/bin/env python3
"""The sync ``send()`` row alone, each round beside its own raw round trip (tcp_paths' limit row):

    .venv/bin/python bench/tcp_sync_row.py [--duration 3] [--rounds 3]

Each round: the blocking echo (``tcp_paths.echo_round_trips``: a 200-byte frame each way between
two Python processes), then ``Producer(local="never").send`` of 100 B in a loop on a fresh
NameServer + broker (ASYNC_FLUSH, default workers), with CPU per message of the producer, the
supervisor and the workers (``tcp_paths.CpuMeter``). Prints each round and the medians; p50 of
the sync row minus p50 of the echo is what shmq adds to one round trip in that round. A
narrower, quicker run than ``tcp_paths.py`` for before/after pairs of the sync path (the
machine's wake-up regime moves both rows, so each round's echo is its own limit). Every process
it starts is stopped by pid; stores go to a temp dir that is removed."""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import tcp_paths as tp  # noqa: E402
import vs_rocketmq  # noqa: E402
from shmq import Producer  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; load average {os.getloadavg()[0]:.2f}",
          flush=True)
    rows = []
    work = Path(tempfile.mkdtemp(prefix="shmq-sync-row-"))
    try:
        for rnd in range(a.rounds):
            erate, elat = tp.echo_round_trips("blocking", a.duration)
            pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", work / f"r{rnd}", None)
            try:
                topic = f"SyncRow{rnd}"
                tp.create_topic(pair.addr, pair.namesrv, topic, 4)
                p = Producer("sync-row-pg", namesrv=pair.namesrv, local="never")
                p.start()
                cpu = tp.CpuMeter(pair)
                rate, lat = tp.sync_sends(p, topic, a.duration)
                used = cpu.per(lat)
                p.shutdown()
            finally:
                pair.stop()
            r = (erate, tp.pct(elat, .5), rate, tp.pct(lat, .5), tp.pct(lat, .99))
            rows.append(r)
            print(f"# round {rnd}: echo {r[0]:,.0f}/s p50 {r[1]:.0f} µs | sync send() {r[2]:,.0f}/s p50 {r[3]:.0f} µs "
                  f"p99 {r[4]:.0f} µs | added p50 {r[3] - r[1]:.0f} µs | {used}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = [statistics.median(r[i] for r in rows) for i in range(5)]
    print(f"median: echo {med[0]:,.0f}/s p50 {med[1]:.0f} µs | sync send() {med[2]:,.0f}/s p50 {med[3]:.0f} µs "
          f"p99 {med[4]:.0f} µs | added p50 {statistics.median(r[3] - r[1] for r in rows):.0f} µs; "
          f"load average after {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
