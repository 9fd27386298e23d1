#!/usr/bin/env python3
"""Where each process's time goes in the paced TCP e2e row: per message and per process, the
system calls by kind, the voluntary context switches (each a sleep, so a wake-up) and the CPU.

    .venv/bin/python bench/paced_wakes.py [--mode async|oneway|sync] [--window 3] [--threads]

Runs ``shmq-bench e2e --transport tcp --peers none --shmq shmq --send-mode MODE`` (the paced
10,000 msgs/s row of ``bench/tcp_paths.py``, one producer process, one PushConsumer process, the
broker) and, once its measured window has begun, attaches for ``--window`` seconds to every
process of the run: ``perf stat --per-thread`` counts the system calls of each thread
(``raw_syscalls:sys_enter`` and the ``syscalls:sys_enter_*`` tracepoints named in ``CALLS``: a
kernel counter per call, not ptrace, so the run keeps its pace), and /proc gives each thread's
voluntary / involuntary switches, run time (schedstat) and user / system ticks. Figures are per
message of the window at the row's pace (10,000/s; a run that fell behind: at its mean sent
rate; the row's own delivered rate and p50 are printed so such a run can be told).
``--mode row`` runs tcp_paths' unpaced sync ``send()`` + PushConsumer row instead
(``bench/tcp_consumer_row.py``), per message at its own rate. perf's tracepoints cost each system
call something, so the rows run slower under it than alone (the consumer row ~2x): ``--no-perf`` leaves
perf out (/proc's switches and CPU only, the row at its own pace). ``--threads`` prints each thread's line too.
Needs perf and root (or perf_event_paranoid <= 1). The processes are the harness's; they end
with it; the store is the harness's temp dir.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import defaultdict

import psutil
from thread_stats import TICK, snap  # (this script's directory)

RATE = 10_000
CALLS = ("futex", "epoll_wait", "epoll_pwait", "epoll_ctl", "sendto", "recvfrom", "read", "write",
         "sendmsg", "recvmsg", "writev", "select", "poll", "ppoll", "getpid", "clock_nanosleep", "nanosleep",
         "sched_yield", "mmap", "munmap", "madvise", "ioctl", "fcntl", "getsockopt", "setsockopt")


def role_of(p: psutil.Process, spawned: list[int]) -> str | None:
    try:
        cmd = " ".join(p.cmdline())
    except psutil.Error:
        return None
    if "resource_tracker" in cmd:
        return None
    if "--consumer" in cmd:  # tcp_paths' PushConsumer process (the consumer row)
        return "consumer"
    if "tcp_consumer_row" in cmd:
        return "producer"
    if "broker.worker" in cmd:
        return "worker"
    # the supervisor's command line names the NameServer too (--namesrv <addr>): the module first
    if "shmq.cli.broker" in cmd or "shmq-broker" in cmd:
        return "supervisor"
    if "namesrv" in cmd:
        return "namesrv"
    if "spawn_main" in cmd:
        # the harness spawns its consumer first, then its producer (shmq/bench/engine.py)
        return "consumer" if p.pid == spawned[0] else "producer"
    return None


def procs_of(root: psutil.Process) -> dict[int, str]:
    kids = root.children(recursive=True)
    spawned = sorted((p for p in kids if "spawn_main" in " ".join(p.cmdline() or [])), key=lambda p: p.create_time())
    spawned_pids = [p.pid for p in spawned if "resource_tracker" not in " ".join(p.cmdline())]
    out = {}
    for p in kids:
        r = role_of(p, spawned_pids)
        if r:
            out[p.pid] = r
    return out


def vol_switches(pid: int) -> int:
    n = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            n += sum(int(line.split()[1]) for line in open(f"/proc/{pid}/task/{tid}/status")
                     if line.startswith("voluntary_ctxt_switches"))
        except FileNotFoundError:
            pass
    return n


def wait_sending(pid: int, limit_s: float = 60, per_s: int = 3000) -> None:
    """Until the producer sleeps more than ``per_s`` times a second (it is pacing its sends; the
    row's sync producer sleeps once a send, which on a loaded machine is 2,000/s or fewer: a
    3,000 mark there waited out its 60 s and measured a window after the row had ended)."""
    end = time.monotonic() + limit_s
    last = vol_switches(pid)
    while time.monotonic() < end:
        time.sleep(0.1)
        now = vol_switches(pid)
        if now - last > per_s // 10:
            return
        last = now


def perf_start(pids) -> tuple[subprocess.Popen, str]:
    """``perf stat --per-thread -I 1000`` on every thread of ``pids``, until stopped."""
    events = ["raw_syscalls:sys_enter"] + [f"syscalls:sys_enter_{c}" for c in CALLS]
    out = tempfile.mktemp(suffix=".csv", prefix="paced-wakes-")
    proc = subprocess.Popen(["perf", "stat", "--per-thread", "-I", "1000", "-x", ",", "-o", out, "-e", ",".join(events),
                             "-p", ",".join(map(str, pids))], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return proc, out


def perf_counts(path: str, skip: int, take: int) -> tuple[dict[int, dict[str, int]], int]:
    """{tid: {call: count}} summed over the 1 s intervals skip+1 .. skip+take, and how many there were."""
    rows: dict[str, dict[int, dict[str, int]]] = defaultdict(lambda: defaultdict(dict))
    for line in open(path).read().splitlines():
        parts = line.split(",")
        if len(parts) < 5 or "-" not in parts[1]:
            continue
        try:
            tid, n = int(parts[1].rsplit("-", 1)[1]), int(parts[2])
        except ValueError:
            continue
        ev = parts[4].split(":")[-1].replace("sys_enter_", "")
        rows[parts[0]][tid]["all" if ev == "sys_enter" else ev] = n
    stamps = sorted(rows, key=float)[skip:skip + take]
    out: dict[int, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for t in stamps:
        for tid, c in rows[t].items():
            for k, n in c.items():
                out[tid][k] += n
    os.unlink(path)
    return out, len(stamps)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", default="async", choices=("async", "oneway", "sync", "row"))
    ap.add_argument("--window", type=float, default=3.0)
    ap.add_argument("--threads", action="store_true")
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--no-perf", action="store_true", help="/proc's figures only (no system calls): the row at its own pace")
    a = ap.parse_args()
    dur = a.window + 5.0
    with tempfile.NamedTemporaryFile(suffix=".json") as res:
        cmd = [sys.executable, "-m", "shmq.cli.bench", "e2e", "--transport", "tcp", "--peers", "none", "--shmq", "shmq",
               "--send-mode", a.mode, "--duration", str(dur), "--warmup", "1", "--no-progress", "--json", res.name]
        if a.workers:
            cmd += ["--workers", str(a.workers)]
        if a.mode == "row":  # tcp_paths' sync send() + PushConsumer row, unpaced (its rate is printed)
            cmd = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tcp_consumer_row.py"),
                   str(a.workers), "1", str(dur)]
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE if a.mode == "row" else subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
        root = psutil.Process(run.pid)
        roles: dict[int, str] = {}
        t_end = time.monotonic() + 120
        while time.monotonic() < t_end and run.poll() is None:
            roles = procs_of(root)
            if a.mode == "row":
                roles[run.pid] = "producer"
            if "producer" in roles.values() and "consumer" in roles.values():
                break
            time.sleep(0.05)
        prod = next(pid for pid, r in roles.items() if r == "producer")
        wait_sending(prod, per_s=300 if a.mode == "row" else 3000)
        roles = procs_of(root)  # (every thread made by now: perf follows those it attached to)
        if a.mode == "row":
            roles[run.pid] = "producer"
        perf, perf_out = (None, None) if a.no_perf else perf_start(list(roles))
        perf_started = time.monotonic()
        time.sleep(2.5)  # perf's attach, the harness's warm-up second
        started = time.monotonic()
        before = snap(roles)
        t0 = time.monotonic()
        time.sleep(a.window)
        after = snap(roles)
        dt = time.monotonic() - t0
        load = os.getloadavg()[0]
        out, err = run.communicate(timeout=300)
        counts, nint = {}, 1
        if perf is not None:
            perf.send_signal(2)
            perf.wait(30)
            # perf's intervals: the ones that lie in the window (1 s each from its start, which came
            # before the sending did; the start is not known to the ms, so whole seconds are skipped)
            counts, nint = perf_counts(perf_out, skip=int(started - perf_started) + 1, take=int(a.window) - 1)
        rate = RATE
        if a.mode == "row":  # per message at the row's own rate
            m = re.search(r" ([\d,]+)/s (p50 .*)$", out or "", re.M)
            rate = float(m.group(1).replace(",", "")) if m else RATE
            row = {"msgs_per_s": rate, "note": m.group(2) if m else err[-300:]}
        else:
            try:
                row = json.load(open(res.name))["results"][0]
            except (OSError, ValueError, KeyError, IndexError):
                print(f"# the e2e run failed: {err[-500:]}")
                row = {}
            sent = row.get("send_msgs_per_s") or RATE
            if sent < 0.95 * RATE:  # behind its pace: per message of what was sent (the run's mean rate)
                rate = sent
    n = rate * dt
    lu = row.get("latency_us") or {}
    print(f"# {time.strftime('%H:%M:%S UTC', time.gmtime())} paced e2e, {a.mode} sends, {a.workers} worker(s): "
          f"delivered {row.get('msgs_per_s', 0):,.0f}/s, p50 {lu.get('p50', '-')} µs, p99 {lu.get('p99', '-')} µs; "
          f"window {dt:.2f} s = {n:,.0f} messages at {rate:,.0f}/s; load {load:.2f} {row.get('note', '')}")
    per_proc: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    lines = []
    for (pid, tid), (comm, v1, i1, r1, u1, s1, _) in sorted(after.items()):
        if (pid, tid) not in before:
            continue
        _, v0, i0, r0, u0, s0, _ = before[(pid, tid)]
        role = roles.get(pid, "?")
        c = {k: x * dt / max(1, nint) for k, x in counts.get(tid, {}).items()}  # to the /proc window's length
        d = {"vol": v1 - v0, "invol": i1 - i0, "cpu": (r1 - r0) / 1e3, "user": (u1 - u0) / TICK * 1e6,
             "sys": (s1 - s0) / TICK * 1e6, **{k: float(x) for k, x in c.items()}}
        for k, x in d.items():
            per_proc[role][k] += x
        if d["vol"] or d["invol"] or d["cpu"] > 0:
            lines.append((role, tid, comm, d))
    top = lambda d: ", ".join(f"{k} {d[k] / n:.2f}" for k in sorted(  # noqa: E731
        (k for k in d if k in CALLS and d[k] / n >= 0.01), key=lambda k: -d[k]))
    print("| process | syscalls/msg | by kind, per msg | voluntary / involuntary switches per msg | "
          "CPU µs/msg (user / sys) |")
    print("|---|---:|---|---|---|")
    for role in ("producer", "worker", "consumer", "supervisor", "namesrv"):
        d = per_proc.get(role)
        if not d:
            continue
        print(f"| {role} | {d.get('all', 0) / n:.2f} | {top(d)} | {d['vol'] / n:.2f} / {d['invol'] / n:.2f} | "
              f"{d['cpu'] / n:.1f} ({d['user'] / n:.1f} / {d['sys'] / n:.1f}) |")
    if a.threads:
        # each process's busiest threads by name, the rest (e.g. the 20 consume threads) as one line
        print("| process | thread | syscalls/msg | by kind | vol / invol per msg | CPU µs/msg |")
        print("|---|---|---:|---|---|---:|")
        for role in ("producer", "worker", "consumer", "supervisor", "namesrv"):
            mine = sorted((x for x in lines if x[0] == role), key=lambda x: -x[3]["cpu"])
            top_n = 2 if role in ("producer", "consumer") else 1
            rest: dict[str, float] = defaultdict(float)
            for _, tid, comm, d in mine[top_n:]:
                for k, x in d.items():
                    rest[k] += x
            shown = [(f"{tid} ({comm})", d) for _, tid, comm, d in mine[:top_n]]
            if len(mine) > top_n:
                shown.append((f"the other {len(mine) - top_n} threads", rest))
            for name, d in shown:
                print(f"| {role} | {name} | {d.get('all', 0) / n:.2f} | {top(d)} | "
                      f"{d['vol'] / n:.2f} / {d['invol'] / n:.2f} | {d['cpu'] / n:.1f} |")


if __name__ == "__main__":
    main()
