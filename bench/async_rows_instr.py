#!/usr/bin/env python3
"""Instructions per message in the producer process of tcp_paths' ``send_async()`` and
``send_oneway()`` rows, under callgrind, each of its threads apart (the broker, one worker,
ASYNC_FLUSH, runs normally beside it):

    .venv/bin/python bench/async_rows_instr.py async|oneway [--n N1 N2] [--annotate [K]]

The producer (``Producer(local="never")``, 100 B bodies, a ``Message(topic, BODY)`` made per send
as tcp_paths does) runs under ``valgrind --tool=callgrind --instr-atstart=no
--separate-threads=yes`` and is instrumented only in two windows of N1 and N2 messages after a
warm-up: ``async`` is tcp_paths' ``async_sends`` loop in its steady state (2,000 in flight when
the window opens and when it closes, each future's ``result()`` taken in order), ``oneway`` its
``oneway_sends`` loop (100 ``send_oneway`` a step), the window closed once the client's lane and
the connection have nothing left to write. The frames go through the client's loop thread (the
caller-thread write, which callgrind's slowness would turn on for every send, is off:
``SHMQ_CALLER_WRITE=0`` unless set), as at the rows' rates. Per
message: (Ir(N2) - Ir(N1)) / (N2 - N1), for the caller's thread, the client's loop thread and the
process. ``--annotate`` prints each thread's top K functions (self) of the N2 window. Its
callgrind client requests come from a small C file built here into a temp dir; every process
it starts is stopped by pid; the store and the callgrind files are in a temp dir that is removed
(kept, and named, with ``AR_KEEP=1``).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

BODY = b"x" * 100
TOPIC = "AsyncInstr"
WINDOW = 2000


def child(a) -> None:
    import collections
    from shmq import Message, Producer
    lib = ctypes.CDLL(a.cglib)
    p = Producer("async-instr-pg", namesrv=a.namesrv, local="never")
    p.start()
    inst = p.instance

    def quiet() -> None:  # the lane, the jobs and every connection's output written
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            busy = inst.oneway_lane.queued != (0, 0) or inst._submitted
            for c in list(inst._clients.values()):
                conn = c.connection
                busy = busy or (conn is not None and (conn._out or conn._writing))
            if not busy:
                return
            time.sleep(0.002)

    inflight: collections.deque = collections.deque()
    if a.path == "async":
        def run(k: int) -> None:  # tcp_paths.windowed_sends' steady state: WINDOW in flight throughout
            for _ in range(k):
                while len(inflight) < WINDOW:
                    inflight.append(p.send_async(Message(TOPIC, BODY)))
                inflight.popleft().result(60)
    else:
        def run(k: int) -> None:  # tcp_paths.oneway_sends, for k messages
            for _ in range(k // 100):
                for _ in range(100):
                    p.send_oneway(Message(TOPIC, BODY))
    run(4000)  # warm: the route, the plan, the worker's C path
    if a.path == "oneway":
        quiet()
    for k in a.n:
        time.sleep(0.3)
        lib.cg_start()
        run(k)
        if a.path == "oneway":
            quiet()
        lib.cg_stop(f"n{k}".encode())
    while inflight:
        inflight.popleft().result(60)
    p.shutdown()


def totals(text: str) -> int:
    return max((int(x) for x in re.findall(r"^(?:summary|totals): (\d+)", text, re.M)), default=0)


def threads(d: Path) -> tuple[tuple[int, Path], tuple[int, Path]]:
    """(Ir, file) of the caller (thread 1, its window's dump) and of the client loop thread
    (the busiest other thread, its dump at the end)"""
    caller, others = None, []
    for f in d.glob("cg.out*"):
        text = f.read_text(errors="replace")
        t = re.search(r"^thread: (\d+)", text, re.M)
        if not t:
            continue
        if t.group(1) == "1":
            if re.search(r"^desc: Trigger: Client Request", text, re.M):
                caller = (totals(text), f)
        else:
            others.append((totals(text), f))
    return caller, max(others)


def top(text: str, k: int) -> list[tuple[int, str]]:
    out = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+)", line)
        if m and "PROGRAM TOTALS" not in line:
            where = m.group(2)
            file, _, fn = where.rpartition(":")
            out.append((int(m.group(1).replace(",", "")), f"{fn}  ({Path(file).name})"))
    return out[:k]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", choices=("async", "oneway"))
    ap.add_argument("--n", type=int, nargs="+", default=[4000, 14000])
    ap.add_argument("--annotate", type=int, nargs="?", const=30, default=0)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--namesrv", help=argparse.SUPPRESS)
    ap.add_argument("--cglib", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a)
    import callgrind_marks
    import vs_rocketmq
    from shmq.bench.peers.shmq_client import create_topic
    tmp = Path(tempfile.mkdtemp(prefix="async-instr-"))
    try:
        cglib = callgrind_marks.build(tmp)
        pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", tmp / "store", 1)
        # One window a run: with --separate-threads=yes a client request's dump (and zero) is
        # the asking thread's alone; another thread's count is in its dump at the process's end
        # (instrumentation is off before and after the window).
        runs = []
        try:
            create_topic(pair.addr, pair.namesrv, TOPIC, 4)
            for k in a.n:
                out = tmp / f"n{k}" / "cg.out"
                out.parent.mkdir()
                cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--separate-threads=yes",
                       f"--callgrind-out-file={out}", sys.executable, __file__, a.path, "--child", "--namesrv",
                       pair.namesrv, "--cglib", cglib, "--n", str(k)]
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                               env=dict(os.environ, PYTHONPATH=str(ROOT),
                                        SHMQ_CALLER_WRITE=os.environ.get("SHMQ_CALLER_WRITE", "0")))
                runs.append(threads(out.parent))
        finally:
            pair.stop()
        (c1, l1), (c2, l2) = runs
        d = a.n[1] - a.n[0]
        print(f"producer, {a.path}: instructions per message (windows N={a.n[0]} / {a.n[1]}, one a run)")
        print(f"  caller: {(c2[0] - c1[0]) / d:,.0f}")
        print(f"  client loop thread: {(l2[0] - l1[0]) / d:,.0f}")
        print(f"  process: {(c2[0] + l2[0] - c1[0] - l1[0]) / d:,.0f}")
        if a.annotate:
            for name, (_, f) in (("caller", c2), ("client loop thread", l2)):
                r = subprocess.run(["callgrind_annotate", "--inclusive=no", str(f)], capture_output=True, text=True)
                print(f"--- {name}, the N={a.n[1]} window, self, per message (fixed costs not taken off)")
                for ir, where in top(r.stdout, a.annotate):
                    print(f"  {ir / a.n[1]:>8,.1f}  {where}")
        if os.environ.get("AR_KEEP"):
            print(f"# kept: {tmp}")
    finally:
        if not os.environ.get("AR_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
