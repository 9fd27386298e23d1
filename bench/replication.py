#!/usr/bin/env python3
"""Replication cost: sends of 100 B over TCP to a single master, an ASYNC_MASTER with a
slave and a SYNC_MASTER with a slave, with 1 and 64 sends in flight, in one run.

    .venv/bin/python bench/replication.py [--duration 3] [--workers 2] [--runs 3]

Each broker pair is started fresh (master, then a slave with haMasterAddress pointing at
the master's HA port; no NameServer), the slave is waited for, then each depth runs for
``--duration`` seconds after a 0.5 s warm-up. 64 in flight = 8 connections x 8 pipelined
sends, so both of the master's workers get work. Latency is send-to-answer per message.
Printed: msgs/s, p50 and p99 µs, and each mode's rate against the single master's at the
same depth (median of ``--runs``).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from broker_send import BODY, Raw, _frame, cpu_model, pct  # noqa: E402

from shmq.protocol import RequestCode, SyncRemotingClient, decode_command, request  # noqa: E402
from shmq.protocol.bodies import KVTable, decode_json  # noqa: E402
from shmq.protocol.headers import (CreateTopicRequestHeader, SendMessageRequestHeader,  # noqa: E402
                                   send_header_to_v2)

TOPIC = "BenchHA"
MODES = ("single master", "ASYNC_MASTER + slave", "SYNC_MASTER + slave")


def start(store: str, workers: int, settings: dict) -> tuple[subprocess.Popen, str]:
    argv = [sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", store, "--workers", str(workers),
            "--log-level", "WARNING"]
    for k, v in {"mappedFileSizeCommitLog": 268435456, "diskMaxUsedSpaceRatio": 95, **settings}.items():
        argv += ["--set", f"{k}={v}"]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    m = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
    if not m:
        p.kill()
        raise SystemExit(f"shmq-broker did not start: {line!r}")
    return p, m.group(1)


def runtime(addr: str) -> dict:
    with SyncRemotingClient(addr) as c:
        return decode_json(c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).body, KVTable).table


def commit(addr: str) -> int:
    return int(runtime(addr)["commitLogMaxOffset"])


def ha_port(addr: str) -> int:
    return int(runtime(addr)["shmqHaListenPort"])


def frames(n: int) -> list[bytes]:
    sh = SendMessageRequestHeader(producerGroup="pg", topic=TOPIC, defaultTopic="TBW102", defaultTopicQueueNums=4,
                                  queueId=0, sysFlag=0, bornTimestamp=int(time.time() * 1000), flag=0,
                                  properties="TAGS\x01bench\x02WAIT\x01true\x02UNIQ_KEY\x01" + "A" * 32)
    v2 = send_header_to_v2(sh)
    return [_frame(request(RequestCode.SEND_MESSAGE_V2, v2, BODY), i + 1) for i in range(n)]


def drive(addr: str, conns: int, depth: int, duration: float) -> tuple[float, list[float], dict]:
    """``conns`` connections with ``depth`` sends pipelined each; (msgs/s, latencies, codes)."""
    fr = frames(depth)
    lat: list[float] = []
    codes: dict[int, int] = {}
    counts = [0] * conns
    lock = threading.Lock()
    t_start = time.perf_counter() + 0.5
    t_end = t_start + duration

    def one(k: int) -> None:
        c = Raw(addr)
        sent_at: dict[int, float] = {}
        mine, n = [], 0
        for i in range(depth):
            sent_at[i + 1] = time.perf_counter()
            c.s.sendall(fr[i])
        while True:
            r = decode_command(c.read_frame())
            now = time.perf_counter()
            if now >= t_start:
                mine.append(now - sent_at[r.opaque])
                n += 1
                codes[r.code] = codes.get(r.code, 0) + 1
            if now > t_end:
                break
            sent_at[r.opaque] = time.perf_counter()
            c.s.sendall(fr[r.opaque - 1])
        counts[k] = n
        with lock:
            lat.extend(mine)
        c.s.close()

    ts = [threading.Thread(target=one, args=(k,)) for k in range(conns)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return sum(counts) / duration, lat, codes


def run_mode(mode: str, workers: int, duration: float) -> dict:
    root = tempfile.mkdtemp(prefix="shmq-bench-ha-")
    procs = []
    try:
        role = {"single master": "ASYNC_MASTER", "ASYNC_MASTER + slave": "ASYNC_MASTER"}.get(mode, "SYNC_MASTER")
        m, addr = start(os.path.join(root, "m"), workers, {"brokerRole": role, "brokerName": "bench"})
        procs.append(m)
        if mode != "single master":
            s, saddr = start(os.path.join(root, "s"), workers, {"brokerRole": "SLAVE", "brokerId": 1,
                                                                "brokerName": "bench",
                                                                "haMasterAddress": f"127.0.0.1:{ha_port(addr)}"})
            procs.append(s)
        with SyncRemotingClient(addr) as c:
            h = CreateTopicRequestHeader(topic=TOPIC, defaultTopic="TBW102", readQueueNums=1, writeQueueNums=1,
                                         perm=6, topicFilterType="SINGLE_TAG")
            assert c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h)).code == 0
        if mode == "SYNC_MASTER + slave":  # until a send is SEND_OK the slave is not there yet
            deadline = time.monotonic() + 20
            while drive(addr, 1, 1, 0.2)[2].get(0) is None and time.monotonic() < deadline:
                pass
        out = {}
        for label, conns, depth in (("1 in flight", 1, 1), ("64 in flight", 8, 8)):
            rate, lat, codes = drive(addr, conns, depth, duration)
            out[label] = (rate, pct(lat, .5), pct(lat, .99), codes)
        if mode != "single master":
            end = commit(addr)
            deadline = time.monotonic() + 30
            while commit(saddr) < end and time.monotonic() < deadline:
                time.sleep(0.05)
            out["slave caught up"] = commit(saddr) >= end
        return out
    finally:
        for p in reversed(procs):
            p.terminate()
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; nproc {os.cpu_count()}; {cpu_model()}; "
          f"Python {sys.version.split()[0]}; load average before {os.getloadavg()[0]:.2f}; workers {a.workers}; "
          f"{a.runs} runs of {a.duration:g} s, medians")
    res: dict[str, list[dict]] = {m: [] for m in MODES}
    for _ in range(a.runs):
        for mode in MODES:  # interleaved, so a load change hits every mode alike
            res[mode].append(run_mode(mode, a.workers, a.duration))
    print("| mode | in flight | msgs/s | p50 µs | p99 µs | vs single master | answers |")
    print("|---|---:|---:|---:|---:|---:|---|")
    for label in ("1 in flight", "64 in flight"):
        base = statistics.median(r[label][0] for r in res["single master"])
        for mode in MODES:
            rows = [r[label] for r in res[mode]]
            rate = statistics.median(x[0] for x in rows)
            p50 = statistics.median(x[1] for x in rows)
            p99 = statistics.median(x[2] for x in rows)
            codes: dict[int, int] = {}
            for x in rows:
                for k, v in x[3].items():
                    codes[k] = codes.get(k, 0) + v
            print(f"| {mode} | {label.split()[0]} | {rate:,.0f} | {p50:.0f} | {p99:.0f} | {rate / base:.0%} | {codes} |")
    for mode in MODES[1:]:
        print(f"# {mode}: slave caught up after every run: {all(r['slave caught up'] for r in res[mode])}")


if __name__ == "__main__":
    main()
