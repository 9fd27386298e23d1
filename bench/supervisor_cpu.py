#!/usr/bin/env python3
"""The broker supervisor's CPU and wake-ups per message, thread by thread, in one of the rows.

    .venv/bin/python bench/supervisor_cpu.py --row consumer|sync|oneway|local [--window 3] [--dump]
    # another tree: cd <tree> && PYTHONPATH=<tree> <this tree>/.venv/bin/python <this tree>/bench/supervisor_cpu.py ...

Starts the row from the tree in the current directory and, once the broker stores messages,
reads every supervisor thread's schedstat run time, user / system ticks and voluntary /
involuntary switches from /proc over ``--window`` seconds (``bench/thread_stats.py``). The
messages in the window are counted exactly: the broker's GET_BROKER_RUNTIME_INFO
``msgPutTotalTodayNow`` (the sum of every queue's next offset) at both ends. The rows:

* ``consumer``: tcp_paths' sync ``send()`` + PushConsumer row (``bench/tcp_consumer_row.py 0 1``);
* ``sync``: the sync ``send()`` row alone (``bench/tcp_sync_row.py --rounds 1``);
* ``oneway``: the paced 10,000/s TCP e2e row with oneway sends (``shmq-bench e2e --transport tcp
  --send-mode oneway --workers 1``, as ``bench/paced_wakes.py --mode oneway``);
* ``local``: the local send row (``shmq-bench produce --transport local``, shmq alone).

Threads are named by ``py-spy dump`` of the supervisor (its Python threads' names; a thread it
does not list keeps its /proc comm); ``--dump`` prints that dump too. No perf, no ptrace in the
window (py-spy's dump comes before it), so the row runs at its own pace. Every process is the
row's own and ends with it."""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import psutil

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from thread_stats import TICK, snap  # noqa: E402

RES = tempfile.mktemp(suffix=".json", prefix="supervisor-cpu-")  # the shmq-bench rows' results

ROWS = {
    "consumer": lambda d: [sys.executable, "bench/tcp_consumer_row.py", "0", "1", str(d)],
    "sync": lambda d: [sys.executable, "bench/tcp_sync_row.py", "--rounds", "1", "--duration", str(d)],
    "oneway": lambda d: [sys.executable, "-m", "shmq.cli.bench", "e2e", "--transport", "tcp", "--peers", "none",
                         "--shmq", "shmq", "--send-mode", "oneway", "--duration", str(d), "--warmup", "1",
                         "--no-progress", "--workers", "1", "--json", RES],
    "local": lambda d: [sys.executable, "-m", "shmq.cli.bench", "produce", "--transport", "local", "--peers", "none",
                        "--shmq", "shmq", "--duration", str(d), "--warmup", "1", "--no-progress", "--json", RES],
}


def find_broker(root: psutil.Process) -> tuple[psutil.Process, str] | None:
    """The row's supervisor and one address its workers listen on."""
    for p in root.children(recursive=True):
        try:
            if "shmq.cli.broker" not in " ".join(p.cmdline()):
                continue
            for w in p.children():
                for c in w.net_connections(kind="tcp"):
                    if c.status == psutil.CONN_LISTEN:
                        return p, f"127.0.0.1:{c.laddr.port}"
        except psutil.Error:
            continue
    return None


def puts(addr: str) -> int:
    from shmq.protocol import RequestCode, SyncRemotingClient, request
    from shmq.protocol.bodies import KVTable, decode_json
    for i in range(3):  # a worker busy with the row may answer late
        try:
            with SyncRemotingClient(addr, timeout=5) as c:
                body = c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).body
            return int(decode_json(body, KVTable).table["msgPutTotalTodayNow"])
        except Exception as e:  # noqa: BLE001 - said, then tried again
            print(f"# GET_BROKER_RUNTIME_INFO to {addr} failed: {e!r}", file=sys.stderr)
            if i == 2:
                raise
            time.sleep(0.2)


def thread_names(pid: int, show: bool) -> dict[int, str]:
    spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    try:
        out = subprocess.run([spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return {}
    if show:
        print(out)
    return {int(t): n for t, n in re.findall(r'^Thread (\d+) \([^)]*\): "([^"]*)"', out, re.M)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--row", required=True, choices=sorted(ROWS))
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--dump", action="store_true", help="print the supervisor's py-spy dump")
    ap.add_argument("--spy", metavar="FILE", help="py-spy record --threads --native the supervisor over the window "
                    "into FILE (raw, collapsed stacks; it pauses the process for each sample: the figures of such a run are not clean)")
    ap.add_argument("--perf", metavar="FILE", help="perf record -g the supervisor over the window into FILE "
                    "(perf report --sort tid,sym -i FILE; the thread ids are in the table)")
    a = ap.parse_args()
    dur = a.window + (14.0 if a.spy or a.perf else 10.0)  # room for a slow start: the window must end before the row
    run = subprocess.Popen(ROWS[a.row](dur), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    root = psutil.Process(run.pid)
    found = None
    end = time.monotonic() + 120
    while found is None and time.monotonic() < end and run.poll() is None:
        found = find_broker(root)
        time.sleep(0.1)
    if found is None:
        print(run.communicate()[0][-2000:])
        raise SystemExit("no broker found")
    sup, addr = found
    # until it has been sending for a second (the consumer row's warm-up sends come 2.5 s before it)
    last, busy = puts(addr), 0
    while busy < 4 and run.poll() is None:
        time.sleep(0.25)
        now = puts(addr)
        busy = busy + 1 if now - last > 100 else 0
        last = now
    names = thread_names(sup.pid, a.dump)
    time.sleep(1.0)
    spy = None
    if a.spy:
        exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        spy = subprocess.Popen([exe, "record", "--pid", str(sup.pid), "--duration", str(int(a.window)), "--rate", "250",
                                "--threads", "--native", "--format", "raw", "-o", a.spy],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if a.perf:
        spy = subprocess.Popen(["perf", "record", "-g", "-F", "2000", "-p", str(sup.pid), "-o", a.perf, "--",
                                "sleep", str(a.window)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    m0, before, t0 = puts(addr), snap([sup.pid]), time.monotonic()
    time.sleep(a.window)
    if spy is not None:
        spy.wait(60)
    m1, after, dt = puts(addr), snap([sup.pid]), time.monotonic() - t0
    load = os.getloadavg()[0]
    out = run.communicate(timeout=300)[0]
    n = max(1, m1 - m0)
    tail = " | ".join(line.strip() for line in out.splitlines()[-2:])
    if os.path.exists(RES):  # a shmq-bench row: its own figures instead of its legend
        try:
            r = json.load(open(RES))["results"][0]
            lu = r.get("latency_us") or {}
            tail = (f"delivered {r.get('msgs_per_s', 0):,.0f}/s, sent {r.get('send_msgs_per_s', 0):,.0f}/s, "
                    f"p50 {lu.get('p50', '-')} µs, p99 {lu.get('p99', '-')} µs")
        except (OSError, ValueError, KeyError, IndexError) as e:
            tail = f"(no result: {e})"
        os.unlink(RES)
    print(f"# {time.strftime('%H:%M:%S UTC', time.gmtime())} row {a.row}: {n:,} messages in {dt:.2f} s "
          f"({n / dt:,.0f}/s); load {load:.2f}; row said: {tail[-300:]}")
    rows = []
    tot: dict[str, float] = defaultdict(float)
    for key, s1 in after.items():
        s0 = before.get(key)
        if s0 is None:
            continue
        d = {"cpu": (s1.run_ns - s0.run_ns) / 1e3, "user": (s1.utime - s0.utime) / TICK * 1e6,
             "sys": (s1.stime - s0.stime) / TICK * 1e6, "vol": s1.vol - s0.vol, "invol": s1.invol - s0.invol,
             "minflt": s1.minflt - s0.minflt}
        for k, x in d.items():
            tot[k] += x
        rows.append((names.get(key[1], s1.comm), key[1], d))
    print("| supervisor thread | CPU µs/msg (user / sys) | wake-ups (vol) /msg | invol /msg | wake-ups/s | "
          "page faults /msg |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, tid, d in sorted(rows, key=lambda r: -r[2]["cpu"]):
        if d["cpu"] or d["vol"]:
            print(f"| {name} ({tid}) | {d['cpu'] / n:.3f} ({d['user'] / n:.2f} / {d['sys'] / n:.2f}) | "
                  f"{d['vol'] / n:.4f} | {d['invol'] / n:.4f} | {d['vol'] / dt:,.0f} | {d['minflt'] / n:.3f} |")
    print(f"| **all** | **{tot['cpu'] / n:.3f}** ({tot['user'] / n:.2f} / {tot['sys'] / n:.2f}) | "
          f"{tot['vol'] / n:.4f} | {tot['invol'] / n:.4f} | {tot['vol'] / dt:,.0f} | {tot['minflt'] / n:.3f} |")


if __name__ == "__main__":
    main()
