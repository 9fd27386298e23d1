#!/usr/bin/env python3
"""Instructions per sync ``send()`` or sync ``send_batch()`` of 32 in the producer process, under
callgrind (the broker, one worker, ASYNC_FLUSH, runs normally beside it):

    .venv/bin/python bench/producer_instr.py send|batch [--n N1 N2] [--premade] [--annotate]

The producer (``Producer(local="never")``, 100 B bodies, every thread of its process) runs under
``valgrind --tool=callgrind --instr-atstart=no`` and is instrumented only in two windows, of N1 and
N2 sends (``send``: messages; ``batch``: batches of 32), after a warm-up; its callgrind client
requests (``CALLGRIND_START_INSTRUMENTATION`` and the others) come from a small C file built
here into a temp dir. (Ir(N2) - Ir(N1)) / (N2 - N1) cancels the fixed costs. Each message is
made in the loop (``Message(topic, BODY)``, as ``bench/tcp_paths.py``'s rows do) unless
``--premade``: then the loop sends the same premade message / list of 32 again (a batch's
UNIQ_KEYs are still drawn per send). ``--annotate`` prints the N2 window's top functions
(``callgrind_annotate``). Every process it starts is stopped by pid; the store and the callgrind
files are in a temp dir that is removed.
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
TOPIC = "ProdInstr"


def child(a) -> None:
    from shmq import Message, Producer
    lib = ctypes.CDLL(a.cglib)
    p = Producer("prod-instr-pg", namesrv=a.namesrv, local="never")
    p.start()
    msg, batch = Message(TOPIC, BODY), [Message(TOPIC, BODY) for _ in range(32)]
    if a.path == "send":
        def run(k):
            if a.premade:
                for _ in range(k):
                    p.send(msg)
            else:
                for _ in range(k):
                    p.send(Message(TOPIC, BODY))
    else:
        def run(k):
            if a.premade:
                for _ in range(k):
                    p.send_batch(batch)
            else:
                for _ in range(k):
                    p.send_batch([Message(TOPIC, BODY) for _ in range(32)])
    run(max(a.n) // 2 + 50)
    for k in a.n:
        lib.cg_start()
        run(k)
        lib.cg_stop(f"n{k}".encode())
    p.shutdown()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", choices=("send", "batch"))
    ap.add_argument("--n", type=int, nargs=2, default=None, help="windows (default 300 1300 sends, 60 260 batches)")
    ap.add_argument("--premade", action="store_true")
    ap.add_argument("--annotate", action="store_true")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--namesrv", help=argparse.SUPPRESS)
    ap.add_argument("--cglib", help=argparse.SUPPRESS)
    a = ap.parse_args()
    a.n = a.n or ([300, 1300] if a.path == "send" else [60, 260])
    if a.child:
        return child(a)
    import callgrind_marks
    import vs_rocketmq
    from shmq.bench.peers.shmq_client import create_topic
    tmp = Path(tempfile.mkdtemp(prefix="prod-instr-"))
    try:
        cglib = callgrind_marks.build(tmp)
        pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", tmp / "store", 1)
        try:
            create_topic(pair.addr, pair.namesrv, TOPIC, 4)
            out = tmp / "cg.out"
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                   sys.executable, __file__, a.path, "--child", "--namesrv", pair.namesrv, "--cglib",
                   cglib, "--n", *map(str, a.n)] + (["--premade"] if a.premade else [])
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=str(ROOT)))
        finally:
            pair.stop()
        irs = {}
        for f in tmp.glob("cg.out.*"):
            text = f.read_text(errors="replace")
            m = re.search(r"^desc: Trigger: Client Request: (n\d+)", text, re.M)
            if m:
                irs[m.group(1)] = (max(int(x) for x in re.findall(r"^(?:summary|totals): (\d+)", text, re.M)), f)
        (i1, _), (i2, f2) = irs[f"n{a.n[0]}"], irs[f"n{a.n[1]}"]
        what = "send" if a.path == "send" else "batch of 32"
        print(f"producer {a.path}{' premade' if a.premade else ''}: {i1:,} / {i2:,} instructions at N={a.n[0]} / "
              f"{a.n[1]}: {(i2 - i1) / (a.n[1] - a.n[0]):,.0f} instructions per {what}")
        if a.annotate:
            r = subprocess.run(["callgrind_annotate", "--inclusive=no", str(f2)], capture_output=True, text=True)
            print("\n".join(r.stdout.splitlines()[:60]))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
