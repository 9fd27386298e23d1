#!/usr/bin/env python3
"""CPU per message of each process on the TCP send paths, one connection, 100 B: the Python
client, the broker's worker (one) and its supervisor, over a fixed number of messages.

    .venv/bin/python bench/tcp_send_procs.py [--paths batch,batch-async,oneway,async] [--n 64000]

For each path (``send_batch`` of 32, ``send_batch_async`` of 32 with 16 batches in flight, ``send_oneway`` counted when stored, ``send_async`` with
2,000 in flight) after a warm-up of 3,200: msgs/s, and user + system CPU time per message of
this process (the client: its caller and loop threads), of the worker and of the supervisor
(flush, index and the other store services). CPU per message moves less with the machine's
load than msgs/s does. Broker on a temp store (ASYNC_FLUSH), stopped by pid.
"""
from __future__ import annotations

import argparse
import collections
import shutil
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from shmq import Message, Producer  # noqa: E402
from shmq.bench.peers.shmq_client import create_topic  # noqa: E402
from tcp_paths import max_offsets  # noqa: E402
from vs_rocketmq import ShmqPair  # noqa: E402

BODY = b"x" * 100
QUEUES = 4


def broker_cpu(pair: ShmqPair) -> tuple[float, float]:
    """(workers' CPU s, supervisor's CPU s) so far."""
    sup = psutil.Process(pair.procs[1].pid)
    workers = 0.0
    for c in sup.children(recursive=True):
        try:
            t = c.cpu_times()
            workers += t.user + t.system
        except psutil.Error:
            pass
    t = sup.cpu_times()
    return workers, t.user + t.system


def run(path: str, n: int, p: Producer, topic: str, pair: ShmqPair) -> int:
    if path == "batch":
        for _ in range(n // 32):
            p.send_batch([Message(topic, BODY) for _ in range(32)])
        return n // 32 * 32
    if path == "batch-async":
        inflight: collections.deque = collections.deque()
        for _ in range(n // 32):
            if len(inflight) >= 16:
                inflight.popleft().result(30)
            inflight.append(p.send_batch_async([Message(topic, BODY) for _ in range(32)]))
        while inflight:
            inflight.popleft().result(30)
        return n // 32 * 32
    if path == "oneway":
        before = max_offsets(pair.addr, topic, QUEUES)
        for _ in range(n):
            p.send_oneway(Message(topic, BODY))
        deadline = time.monotonic() + 60
        while max_offsets(pair.addr, topic, QUEUES) - before < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return max_offsets(pair.addr, topic, QUEUES) - before
    inflight = collections.deque()
    for _ in range(n):
        if len(inflight) >= 2000:
            inflight.popleft().result(30)
        inflight.append(p.send_async(Message(topic, BODY)))
    while inflight:
        inflight.popleft().result(30)
    return n


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--paths", default="batch,batch-async,oneway,async")
    ap.add_argument("--n", type=int, default=64000)
    a = ap.parse_args()
    paths = a.paths.split(",")
    work = Path(tempfile.mkdtemp(prefix="shmq-tcp-procs-"))
    pair = ShmqPair("ASYNC_FLUSH", work, 1)
    try:
        create_topic(pair.addr, pair.namesrv, "Procs", QUEUES)
        p = Producer("tcp-procs-pg", namesrv=pair.namesrv, local="never")
        p.start()
        for path in paths:
            run(path, 3200, p, "Procs", pair)
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {a.n} messages per path; "
              f"load average {psutil.getloadavg()[0]:.2f}")
        print("| path | msgs/s | client CPU µs/msg | worker CPU µs/msg | supervisor CPU µs/msg |")
        print("|---|---:|---:|---:|---:|")
        for path in paths:
            w0, s0 = broker_cpu(pair)
            c0, t0 = time.process_time(), time.perf_counter()
            got = run(path, a.n, p, "Procs", pair)
            t1, c1 = time.perf_counter(), time.process_time()
            w1, s1 = broker_cpu(pair)
            print(f"| {path} | {got / (t1 - t0):,.0f} | {1e6 * (c1 - c0) / got:.2f} | {1e6 * (w1 - w0) / got:.2f} | "
                  f"{1e6 * (s1 - s0) / got:.2f} |", flush=True)
        p.shutdown()
    finally:
        pair.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
