"""Trace a local e2e row's latency tail: which messages were late, whose lateness it was
(the producer started its send late, or the consumer saw a sent message late), and what held
the CPU while the producer's or the consumer's thread waited for one.

    bench/e2e_tail.py run <out> [--sched] -- <shmq-bench e2e arguments>
    bench/e2e_tail.py summary <out>

``run`` sets SHMQ_BENCH_TAIL_DIR=<out> (shmq/bench/tail.py: per-message records of every row)
and, with ``--sched``, runs the bench under ``perf sched record -k CLOCK_MONOTONIC`` (the
records' clock) and writes ``perf script`` into <out>/sched.txt. ``summary`` prints, per row:
p50/p99 of the records, the late episodes (messages at or above the row's p99, grouped when
less than 2 ms apart), and how the late messages' latency divides between the producer's
lateness (due -> its wait ended), the send call and the rest (sent -> the consumer's clock).
With sched.txt, for the row's producer thread and consumer thread: every wait of more than
200 µs between being woken (or preempted) and running, inside the window, with the time
charged to what ran on that CPU meanwhile, by owner: the row's service processes (a broker),
the producer's or consumer's own other threads (by thread name), the harness, or anything else.
"""
from __future__ import annotations

import collections
import glob
import json
import os
import re
import subprocess
import sys

WAIT_NS = 200_000
EPISODE_GAP_NS = 2_000_000


def _load(out: str) -> dict:
    rows: dict = collections.defaultdict(dict)
    for path in glob.glob(os.path.join(out, "*.json")):
        with open(path) as f:
            doc = json.load(f)
        name = os.path.basename(path)
        if name.endswith("-services.json"):
            rows[doc["row"]]["services"] = doc
        else:
            rows[doc["row"]][doc["kind"]] = doc
    return rows


def _pct(sorted_vals: list, q: float) -> int:
    return sorted_vals[min(len(sorted_vals) - 1, int(len(sorted_vals) * q))]


def _row_summary(name: str, row: dict) -> tuple[int, int] | None:
    cons = row.get("consumer")
    if not cons or not cons["rows"]:
        return None
    recs = sorted(cons["rows"])
    lats = sorted(n - s for s, n in recs)
    p50, p99 = _pct(lats, 0.5), _pct(lats, 0.99)
    print(f"\n## {name}: {len(recs)} messages, p50 {p50 / 1e3:.1f} µs, p99 {p99 / 1e3:.0f} µs, "
          f"p99.9 {_pct(lats, 0.999) / 1e3:.0f} µs, max {lats[-1] / 1e3:.0f} µs")
    t0 = recs[0][0]
    prod = {s: (st, r) for s, st, r in row["producer"]["rows"]} if "producer" in row else {}
    late = [(s, n) for s, n in recs if n - s >= p99]
    parts = [0, 0, 0]
    for s, n in late:
        st, r = prod.get(s, (s, s))
        parts[0] += st - s
        parts[1] += r - st
        parts[2] += n - r
    tot = sum(parts) or 1
    print(f"late (>= p99): {len(late)} messages; their latency: producer started late {100 * parts[0] / tot:.0f} %, "
          f"send call {100 * parts[1] / tot:.0f} %, sent -> consumer {100 * parts[2] / tot:.0f} %")
    eps: list = []
    for s, n in late:
        if eps and s - eps[-1][1] < EPISODE_GAP_NS:
            e = eps[-1]
            e[1], e[2], e[3] = s, e[2] + 1, max(e[3], n - s)
        else:
            eps.append([s, s, 1, n - s])
    print(f"episodes: {len(eps)}")
    for a, b, k, mx in eps:
        st, _ = prod.get(a, (a, a))
        who = "producer" if st - a > (mx - (st - a)) else "consumer"
        print(f"  at {(a - t0) / 1e6:8.1f} ms (clock {a / 1e9:.6f} s): {k:4d} messages over {(b - a) / 1e6:5.1f} ms, "
              f"max {mx / 1e3:7.0f} µs, mostly {who}")
    return recs[0][0], recs[-1][1]


_EV = re.compile(r"^\s*(?P<comm>.+?)\s+(?P<pid>-?\d+)/(?P<tid>-?\d+)\s+\[(?P<cpu>\d+)\]\s+(?P<t>[\d.]+):\s+"
                 r"sched:(?P<ev>\w+):\s+(?P<rest>.*)$")


def _sched(out: str) -> list:
    path = os.path.join(out, "sched.txt")
    if not os.path.exists(path):
        return []
    evs = []
    with open(path) as f:
        for line in f:
            m = _EV.match(line)
            if m:
                evs.append((int(float(m["t"]) * 1e9), int(m["cpu"]), int(m["pid"]), int(m["tid"]),
                            m["comm"].strip(), m["ev"], m["rest"]))
    return evs


def _blame(name: str, row: dict, evs: list, window: tuple[int, int]) -> None:
    watch = {}
    for kind in ("producer", "consumer"):
        if kind in row and row[kind].get("tid"):
            watch[row[kind]["tid"]] = (kind, row[kind]["pid"])
    if not watch:
        return
    services = set(row.get("services", {}).get("pids", []))
    tgid = {}  # tid -> pid, from the events seen
    for t, cpu, pid, tid, comm, ev, rest in evs:
        tgid[tid] = pid
    harness = {pid for t, cpu, pid, tid, comm, ev, rest in evs if comm.startswith("shmq-bench")}

    def owner(tid: int, comm: str, waiter_pid: int) -> str:
        pid = tgid.get(tid, tid)
        if pid in services:  # by thread: ThreadService names its OS thread (shmq-index, shmq-flush, ...)
            return f"broker: {comm}"
        if pid == waiter_pid:
            return f"its own process's other threads: {comm}"
        if any(pid == p for _, p in watch.values()):
            return "the other client process (producer/consumer)"
        if pid in harness:
            return "the bench harness"
        if tid == 0:
            return "idle"
        return f"other: {comm}"

    waiting: dict = {}  # tid -> (since, {owner: ns})
    running: dict = {}  # cpu -> (tid, comm, since)
    totals = {k: collections.Counter() for k, _ in watch.values()}
    counts = collections.Counter()
    worst = {k: 0 for k, _ in watch.values()}
    lo, hi = window
    for t, cpu, pid, tid, comm, ev, rest in evs:
        if ev == "sched_waking":
            m = re.search(r" pid=(\d+)", rest)
            w = int(m.group(1)) if m else -1
            if w in watch and w not in waiting:
                waiting[w] = [t, collections.Counter()]
        elif ev == "sched_switch":
            prev = re.search(r"prev_pid=(\d+) prev_prio=\d+ prev_state=(\S+)", rest)
            nxt = re.search(r"next_comm=(.*?) next_pid=(\d+)", rest)
            if not prev or not nxt:
                continue
            ptid, pstate, ntid = int(prev.group(1)), prev.group(2), int(nxt.group(2))
            ran = running.get(cpu)
            if ran is not None:
                for w, (since, who) in waiting.items():
                    if ran[0] not in watch:
                        who[owner(ran[0], ran[1], watch[w][1])] += t - max(since, ran[2])
            running[cpu] = (ntid, nxt.group(1), t)
            if ptid in watch and pstate.startswith("R") and ptid not in waiting:
                waiting[ptid] = [t, collections.Counter()]  # preempted: waits for a CPU too
            if ntid in waiting:
                since, who = waiting.pop(ntid)
                d = t - since
                if d >= WAIT_NS and lo <= since <= hi:
                    kind = watch[ntid][0]
                    counts[kind] += 1
                    worst[kind] = max(worst[kind], d)
                    who["(not seen: an idle CPU's wake-up, or a task perf does not show)"] += max(0, d - sum(who.values()))
                    totals[kind].update(who)
    for kind, tot in totals.items():
        all_ns = sum(tot.values())
        print(f"{name} {kind} thread: {counts[kind]} waits >= {WAIT_NS // 1000} µs in the window, "
              f"{all_ns / 1e6:.1f} ms in all, the longest {worst[kind] / 1e6:.2f} ms; the CPU meanwhile ran:")
        for who, ns in tot.most_common(12):
            print(f"    {ns / 1e6:7.2f} ms  {who}")


def summary(out: str) -> None:
    rows = _load(out)
    evs = _sched(out)
    for name, row in rows.items():
        window = _row_summary(name, row)
        if window and evs:
            _blame(name, row, evs, window)


def run(out: str, sched: bool, args: list[str]) -> int:
    os.makedirs(out, exist_ok=True)
    env = dict(os.environ, SHMQ_BENCH_TAIL_DIR=os.path.abspath(out))
    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cmd = [os.path.join(here, ".venv", "bin", "shmq-bench"), "e2e", *args]
    data = os.path.join(out, "sched.data")
    if sched:
        cmd = ["perf", "sched", "record", "-k", "CLOCK_MONOTONIC", "-o", data, "--", *cmd]
    rc = subprocess.call(cmd, env=env)
    if sched and os.path.exists(data):
        with open(os.path.join(out, "sched.txt"), "w") as f:
            subprocess.call(["perf", "script", "-i", data, "-F", "comm,pid,tid,cpu,time,event,trace"],
                            stdout=f, stderr=subprocess.DEVNULL)
    return rc


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[0] == "summary":
        summary(argv[1])
        return 0
    if len(argv) >= 2 and argv[0] == "run":
        rest = argv[2:]
        sched = "--sched" in rest[: rest.index("--")] if "--" in rest else "--sched" in rest
        args = rest[rest.index("--") + 1:] if "--" in rest else []
        return run(argv[1], sched, args)
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
