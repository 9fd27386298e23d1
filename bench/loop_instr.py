#!/usr/bin/env python3
"""Instructions per request in a shmq server process under callgrind, to compare event loops
(``SHMQ_UVLOOP=0|1``) where wall-clock rows do not repeat on this machine.

    .venv/bin/python bench/loop_instr.py PATH [--n N1 N2] [--secs S]

PATH, and the process measured:

* ``sync``, ``async``, ``oneway``, ``batch``, ``batch-async``: the one broker worker (``--workers 1``,
  ASYNC_FLUSH), a Python ``Producer(local="never")`` in this process sending 100 B: ``send()``
  one at a time, or ``bench/tcp_send_procs.py``'s paths (2,000 async in flight, oneway counted
  when stored, ``send_batch`` of 32 one at a time, batches of 32 with 16 in flight). Two windows of N1 and N2 messages after a
  warm-up of 640: (Ir(N2) - Ir(N1)) / (N2 - N1) cancels the fixed costs.
* ``java``: the one broker worker under the Java benchmark pair of ``bench/vs_rocketmq.py``
  (64 sync sender threads, 128 B, and the push consumer): Ir over ``--secs`` seconds of the
  producer's run divided by the messages stored in them (the queues' max offsets). The worker
  is ~50x slower under callgrind, so each read carries more frames than in a real run.
* ``namesrv``: a NameServer with two brokers registered, GET_ROUTEINFO_BY_TOPIC from one
  blocking connection, one in flight; two windows as above.

The process runs under valgrind through a ``sitecustomize`` in a temp dir (a worker: the one
with ``SHMQ_WORKER_ID``), instrumented only for the window. Every process it starts is stopped
by pid; stores and callgrind files go to a temp dir that is removed (kept, and named, with
``LI_KEEP=1``).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

VALGRIND = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
SITE = f'''import os, sys
if not os.environ.get("LI_UNDER") and os.environ.get("SHMQ_WORKER_ID") is not None:
    os.environ["LI_UNDER"] = "1"
    os.execvp("valgrind", {VALGRIND!r} + ["--callgrind-out-file=" + os.environ["LI_OUT"] + ".%p",
                                          sys.executable, "-m", "shmq.broker.worker.main"])
'''


def callgrind(pid: int, cmd: str) -> None:
    subprocess.run(["callgrind_control", *cmd.split(), str(pid)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def instr_on(pid: int) -> None:
    callgrind(pid, "-i on")
    time.sleep(1)
    callgrind(pid, "-z")


def total_ir(out: Path) -> int:
    """The window's count: the first dump (``callgrind_control -d``) of the process measured."""
    dumps = sorted(out.parent.glob(out.name + ".*.1"), key=lambda f: f.stat().st_size)
    return int(re.search(r"^(?:summary|totals): (\d+)", dumps[-1].read_text(), re.M).group(1))


def broker(tmp: Path, out: Path):
    """A NameServer and a one-worker broker whose worker runs under callgrind."""
    import vs_rocketmq
    (tmp / "site").mkdir(exist_ok=True)
    (tmp / "site" / "sitecustomize.py").write_text(SITE)
    os.environ.update(PYTHONPATH=str(tmp / "site"), LI_OUT=str(out))
    try:
        pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", tmp, 1)
    finally:
        os.environ.pop("PYTHONPATH")
    import psutil
    return pair, psutil.Process(pair.procs[1].pid).children()[0].pid


def client_window(path: str, n: int, tmp: Path, out: Path) -> int:
    import tcp_send_procs as tsp
    from shmq import Message, Producer
    from shmq.bench.peers.shmq_client import create_topic
    pair, pid = broker(tmp, out)
    try:
        create_topic(pair.addr, pair.namesrv, "Loop", tsp.QUEUES)
        p = Producer("loop-instr-pg", namesrv=pair.namesrv, local="never")
        p.start()
        if path == "sync":
            def run(k):
                for _ in range(k):
                    p.send(Message("Loop", tsp.BODY))
        else:
            def run(k):
                tsp.run(path, k, p, "Loop", pair)
        run(640)
        instr_on(pid)
        run(n)
        time.sleep(0.5)
        callgrind(pid, "-d")
        p.shutdown()
    finally:
        pair.stop()
    return total_ir(out)


def java_window(secs: int, tmp: Path, out: Path) -> tuple[int, int]:
    import vs_rocketmq as V
    from shmq.protocol import RequestCode, SyncRemotingClient, request
    from shmq.protocol.headers import GetMaxOffsetRequestHeader
    from tests.thirdparty import jvm
    from tests.thirdparty.harnesses import _client_props
    cp = V.bench_cp()
    logs = tmp / "logs"
    logs.mkdir()
    pair, pid = broker(tmp, out)

    def stored() -> int:
        with SyncRemotingClient(pair.addr, timeout=30) as c:
            return sum(int(c.invoke(request(RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(
                topic=V.TOPIC, queueId=q))).ext_fields["offset"]) for q in range(V.QUEUES))

    cons = prod = None
    try:
        V.create_topic(pair.addr, pair.namesrv)
        props = _client_props(logs)
        ready = threading.Event()
        cons = subprocess.Popen(jvm.java_command("RmqBench", cp, "consumer", pair.namesrv, V.TOPIC, "loop_cg", "20",
                                                 heap="256m", props=props),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(logs / "c.err", "wb"))
        threading.Thread(target=V._lines, args=(cons, [], ready), daemon=True).start()
        if not ready.wait(120):
            raise SystemExit(f"consumer did not start; see {logs / 'c.err'}")
        time.sleep(20)  # its first rebalance, at callgrind's pace
        prod = subprocess.Popen(jvm.java_command("RmqBench", cp, "producer", pair.namesrv, V.TOPIC, "64", "128", "5",
                                                 str(secs + 40), heap="256m", props=props),
                                stdout=subprocess.DEVNULL, stderr=open(logs / "p.err", "wb"), stdin=subprocess.DEVNULL)
        time.sleep(20)
        instr_on(pid)
        n0 = stored()
        time.sleep(secs)
        n1 = stored()
        callgrind(pid, "-d")
    finally:
        for p in (prod, cons):
            if p is not None:
                p.kill()
                p.wait(30)
        pair.stop()
    return total_ir(out), n1 - n0


def namesrv_window(n: int, tmp: Path, out: Path) -> int:
    import namesrv_bench as nb
    from shmq.protocol import RequestCode, SyncRemotingClient, request
    p = subprocess.Popen(VALGRIND + [f"--callgrind-out-file={out}.%p", sys.executable, "-m", "shmq.cli.namesrv",
                                     "--port", "0", "--log-level", "WARNING"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, cwd=ROOT)
    try:
        addr = re.search(r"listening on (\S+)", p.stdout.readline().decode()).group(1)
        regs = nb.register_brokers(addr)
        with SyncRemotingClient(addr, timeout=30) as c:
            req = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=nb.TOPIC)
            for _ in range(200):
                c.invoke(req)
            instr_on(p.pid)
            for _ in range(n):
                c.invoke(req)
            callgrind(p.pid, "-d")
        for r in regs:
            r.close()
    finally:
        p.terminate()
        p.wait(60)
        p.stdout.close()
    return total_ir(out)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", choices=("sync", "async", "oneway", "batch", "batch-async", "java", "namesrv"))
    ap.add_argument("--n", type=int, nargs=2, default=None, help="the two windows (default: 200 600 for "
                    "sync, 2000 6000 for namesrv, 6400 19200 for the others)")
    ap.add_argument("--secs", type=int, default=20, help="java: the window in seconds")
    a = ap.parse_args()
    n1, n2 = a.n or {"sync": (200, 600), "namesrv": (2000, 6000)}.get(a.path, (6400, 19200))
    from shmq.protocol.loop import loop_name
    what = "route query" if a.path == "namesrv" else "message"
    tmp = Path(tempfile.mkdtemp(prefix="loop-instr-"))
    try:
        if a.path == "java":
            ir, n = java_window(a.secs, tmp, tmp / "cg")
            print(f"{loop_name()} {a.path}: {ir:,} instructions, {n:,} messages stored: "
                  f"{ir / max(1, n):,.0f} instructions per message")
            return
        irs = []
        for k in (n1, n2):
            (tmp / str(k)).mkdir()
            out = tmp / str(k) / "cg"
            irs.append(namesrv_window(k, tmp / str(k), out) if a.path == "namesrv"
                       else client_window(a.path, k, tmp / str(k), out))
        print(f"{loop_name()} {a.path}: {irs[0]:,} / {irs[1]:,} instructions at N={n1} / {n2}: "
              f"{(irs[1] - irs[0]) / (n2 - n1):,.0f} instructions per {what}")
    finally:
        if not os.environ.get("LI_KEEP"):
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(tmp)


if __name__ == "__main__":
    main()
