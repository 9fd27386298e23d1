#!/usr/bin/env python3
"""How the TCP ``send_async()`` producer's two threads (the caller and the client's loop thread)
take turns on the GIL, beside the row's rate: per thread, CPU time and context switches
(voluntary: it slept, on the GIL, a lock or the selector; involuntary: preempted) per 1,000
messages, read from /proc/self/task before and after the timed run.

    .venv/bin/python bench/async_gil_turns.py [--paths async,batch] [--n 128000] [--workers 1]
        [--switch-ms 5] [--style procs|paths] [--duration 3]

``--style procs`` is ``bench/tcp_send_procs.py``'s loop (a fixed count, a 3,200 warm-up);
``--style paths`` is ``bench/tcp_paths.py``'s (``async_sends`` / ``batch_sends`` for ``--duration``
s, no warm-up). ``--switch-ms`` sets ``sys.setswitchinterval`` for
the run (the experiment only: the library never changes it). Broker on a temp store
(ASYNC_FLUSH, ``--workers`` workers), stopped by pid.
"""
from __future__ import annotations

import argparse
import gc
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from shmq import Producer  # noqa: E402
from shmq.bench.peers.shmq_client import create_topic  # noqa: E402
from tcp_paths import async_sends, batch_sends  # noqa: E402
from tcp_send_procs import broker_cpu, run  # noqa: E402
from thread_stats import TICK, snap  # noqa: E402
from vs_rocketmq import ShmqPair  # noqa: E402


def threads() -> dict[str, tuple[float, float, int, int]]:
    """name -> (user CPU s, system CPU s, voluntary, involuntary context switches) of this
    process's threads (``thread_stats.snap``), named by their Python thread."""
    names = {t.native_id: t.name for t in threading.enumerate()}
    out = {}
    for (_, tid), st in snap([os.getpid()]).items():
        name = names.get(tid, f"tid {tid}")
        name = "caller" if name == "MainThread" else "loop" if name.startswith("shmq-client") else name
        out[name] = (st.utime / TICK, st.stime / TICK, st.vol, st.invol)
    return out


def cpu(d: tuple, n: int) -> str:
    return f"{1e6 * (d[0] + d[1]) / n:.2f} ({1e6 * d[0] / n:.2f} + {1e6 * d[1] / n:.2f})"


def timed(style: str, path: str, n: int, duration: float, p: Producer, topic: str, pair) -> tuple[int, float]:
    t0 = time.perf_counter()
    if style == "procs":
        got = run(path, n, p, topic, pair)
        return got, time.perf_counter() - t0
    if path == "async":
        rate = async_sends(p, topic, duration)
    else:
        rate = batch_sends(p, topic, duration)
    dt = time.perf_counter() - t0
    return round(rate * dt), dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paths", default="async,batch")
    ap.add_argument("--n", type=int, default=128000)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--switch-ms", type=float, default=None)
    ap.add_argument("--style", choices=("procs", "paths"), default="procs")
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--perf-trace", metavar="FILE", help="`perf trace -s` of this process's threads over each "
                    "timed run (futex: GIL and lock waits; epoll_wait, sendto, recvfrom), into FILE")
    a = ap.parse_args()
    if a.switch_ms:
        sys.setswitchinterval(a.switch_ms / 1000)
    work = Path(tempfile.mkdtemp(prefix="shmq-gil-turns-"))
    pair = ShmqPair("ASYNC_FLUSH", work, a.workers)
    try:
        create_topic(pair.addr, pair.namesrv, "Turns", 4)
        p = Producer("gil-turns-pg", namesrv=pair.namesrv, local="never")
        p.start()
        if a.style == "procs":
            for path in a.paths.split(","):
                run(path, 3200, p, "Turns", pair)
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; style {a.style}; workers {a.workers}; "
              f"switch interval {sys.getswitchinterval() * 1e3:g} ms; load average {psutil.getloadavg()[0]:.2f}")
        print("| path | msgs/s | caller CPU µs/msg (user + sys) | loop CPU µs/msg (user + sys) | caller vol / invol "
              "switches per 1k msgs | loop vol / invol per 1k | worker CPU µs/msg | gc runs gen 0 / 1 / 2 |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|")
        for path in a.paths.split(","):
            w0, _ = broker_cpu(pair)
            g0 = [st["collections"] for st in gc.get_stats()]
            tracer = None
            if a.perf_trace:
                tracer = subprocess.Popen(["perf", "trace", "-s", "-o", f"{a.perf_trace}.{path}", "-p", str(os.getpid())],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(1.0)  # attached
            b = threads()
            got, dt = timed(a.style, path, a.n, a.duration, p, "Turns", pair)
            e = threads()
            if tracer is not None:
                tracer.send_signal(signal.SIGINT)
                tracer.wait(30)
                tids = {t.name: t.native_id for t in threading.enumerate()}
                print(f"# perf trace of {path}: {a.perf_trace}.{path}; caller tid {tids.get('MainThread')}, loop tid "
                      f"{[v for k, v in tids.items() if k.startswith('shmq-client')]}; {got} messages")
            w1, _ = broker_cpu(pair)
            gcs = " / ".join(str(st["collections"] - g) for st, g in zip(gc.get_stats(), g0))
            d = {k: tuple(x - y for x, y in zip(e[k], b[k])) for k in ("caller", "loop")}
            k = 1000 / got
            print(f"| {path} | {got / dt:,.0f} | {cpu(d['caller'], got)} | {cpu(d['loop'], got)} | "
                  f"{d['caller'][2] * k:.1f} / {d['caller'][3] * k:.1f} | {d['loop'][2] * k:.1f} / {d['loop'][3] * k:.1f} | "
                  f"{1e6 * (w1 - w0) / got:.2f} | {gcs} |", flush=True)
        p.shutdown()
    finally:
        pair.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
