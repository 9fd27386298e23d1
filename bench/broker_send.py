#!/usr/bin/env python3
"""Broker over TCP on loopback, one connection: sync sends of 100 B, batches of 32 x 100 B,
and pull throughput, with workers = 1 and 2; next to Redis Streams when redis-server exists.

    .venv/bin/python bench/broker_send.py [--duration 3] [--workers 1 2] [--no-redis]

Each scenario runs for ``--duration`` seconds after a 0.5 s warm-up on one blocking socket
with pre-encoded requests (the client costs as little as Python allows):

* ``GET_MAX_OFFSET``: the cheapest request, one in flight: what the transport alone costs.
* ``send 100 B``: SEND_MESSAGE_V2, one in flight; msgs/s and round-trip p50/p99.
* ``batch 32x100 B``: SEND_BATCH_MESSAGE, one in flight; msgs/s = 32 x batches/s.
* ``batch 32x100 B, 8 in flight``: the same, pipelined (answers matched by opaque).
* ``pull 32``: PULL_MESSAGE of up to 32 messages, one in flight, over what was sent.

Redis Streams (redis-server from Debian, redis-py): XADD one at a time (p50), XADD
pipelined by 32 (the same batching), XREADGROUP COUNT 32. Same machine, same run.
"""
from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

from shmq.message.batch import BatchEntry, encode_batch
from shmq.message.names import PERM_RW, TBW102
from shmq.protocol import RequestCode, SyncRemotingClient, decode_command, encode_command, request
from shmq.protocol.headers import (CreateTopicRequestHeader, PullMessageRequestHeader, SendMessageRequestHeader,
                                   send_header_to_v2)

TOPIC = "BenchTopic"
BODY = b"x" * 100


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def start_broker(workers: int, store: str, extra: list[str] = ()) -> tuple[subprocess.Popen, str]:
    p = subprocess.Popen([sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", store,
                          *[a for kv in extra for a in ("--set", kv)],
                          "--workers", str(workers), "--log-level", "WARNING",
                          "--set", "mappedFileSizeCommitLog=268435456",
                          # statvfs on some VMs counts reserved blocks as used (76% here): keep
                          # the store's disk-pressure expiry from deleting files mid-run
                          "--set", "diskMaxUsedSpaceRatio=95"],
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    m = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
    if not m:
        p.kill()
        raise SystemExit(f"shmq-broker did not start: {line!r}")
    return p, m.group(1)


class Raw:
    """A blocking socket with a minimal frame reader."""

    def __init__(self, addr: str):
        host, port = addr.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def read_frame(self) -> bytes:
        buf = self.buf
        while True:
            if len(buf) >= 4:
                (n,) = struct.unpack_from(">i", buf, 0)
                if len(buf) >= 4 + n:
                    frame = bytes(buf[4:4 + n])
                    del buf[:4 + n]
                    return frame
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk


def _frame(cmd, opaque: int) -> bytes:
    cmd.opaque = opaque
    return encode_command(cmd)


def send_frames(v2h: dict, body: bytes, code: int, n: int = 64) -> list[bytes]:
    return [_frame(request(code, v2h, body), i + 1) for i in range(n)]


def run_closed_loop(conn: Raw, frames: list[bytes], duration: float, per: int, check: bool = True):
    lat: list[float] = []
    i = 0
    t_end = time.perf_counter() + duration
    warm_end = time.perf_counter() + 0.5
    count = 0
    while True:
        t0 = time.perf_counter()
        conn.s.sendall(frames[i % len(frames)])
        resp = conn.read_frame()
        t1 = time.perf_counter()
        i += 1
        if check and i == 1:
            r = decode_command(resp)
            assert r.code == 0, (r.code, r.remark)
        if t0 < warm_end:
            t_start = t1
            continue
        lat.append(t1 - t0)
        count += per
        if t1 > t_end:
            break
    elapsed = time.perf_counter() - t_start
    return count / elapsed, lat


def run_pipelined(conn: Raw, frames: list[bytes], duration: float, per: int, depth: int):
    t_end = time.perf_counter() + duration + 0.5
    inflight = 0
    i = 0
    count = 0
    t_start = time.perf_counter() + 0.5
    started = False
    while True:
        while inflight < depth:
            conn.s.sendall(frames[i % len(frames)])
            i += 1
            inflight += 1
        conn.read_frame()
        inflight -= 1
        now = time.perf_counter()
        if not started:
            if now >= t_start:
                started, t_start, count = True, now, 0
            continue
        count += per
        if now > t_end:
            break
    while inflight:
        conn.read_frame()
        inflight -= 1
    return count / (time.perf_counter() - t_start)


def pct(lat: list[float], p: float) -> float:
    s = sorted(lat)
    return s[min(len(s) - 1, int(len(s) * p))] * 1e6


def bench_shmq(workers: int, duration: float, extra: list[str] = ()) -> list[tuple[str, float, str]]:
    store = tempfile.mkdtemp(prefix="shmq-bench-")
    p, addr = start_broker(workers, store, extra)
    rows = []
    try:
        with SyncRemotingClient(addr) as c:
            h = CreateTopicRequestHeader(topic=TOPIC, defaultTopic=TBW102, readQueueNums=1, writeQueueNums=1,
                                         perm=PERM_RW, topicFilterType="SINGLE_TAG")
            assert c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h)).code == 0
        conn = Raw(addr)
        sh = SendMessageRequestHeader(producerGroup="pg", topic=TOPIC, defaultTopic=TBW102, defaultTopicQueueNums=4,
                                      queueId=0, sysFlag=0, bornTimestamp=int(time.time() * 1000), flag=0,
                                      properties="TAGS\x01bench\x02KEYS\x01k\x02UNIQ_KEY\x01" + "A" * 32)
        v2 = send_header_to_v2(sh)
        floor = [_frame(request(RequestCode.GET_MAX_OFFSET, topic=TOPIC, queueId=0), 1)]
        rate, lat = run_closed_loop(conn, floor, duration, 1)
        rows.append(("GET_MAX_OFFSET round trip (the transport's floor)", rate,
                     f"p50 {pct(lat, .5):.0f} µs, p99 {pct(lat, .99):.0f} µs"))
        rate, lat = run_closed_loop(conn, send_frames(v2, BODY, RequestCode.SEND_MESSAGE_V2), duration, 1)
        rows.append(("send 100 B, sync", rate, f"p50 {pct(lat, .5):.0f} µs, p99 {pct(lat, .99):.0f} µs"))
        sh.batch = True
        sh.properties = "WAIT\x01true"
        batch = encode_batch([BatchEntry(body=BODY, properties=f"TAGS\x01bench\x02UNIQ_KEY\x01{i:032X}", flag=0)
                              for i in range(32)])
        bframes = send_frames(send_header_to_v2(sh), batch, RequestCode.SEND_BATCH_MESSAGE)
        rate, lat = run_closed_loop(conn, bframes, duration, 32)
        rows.append(("batch 32x100 B, sync", rate, f"p50 {pct(lat, .5):.0f} µs per batch"))
        rate = run_pipelined(conn, bframes, duration, 32, 8)
        rows.append(("batch 32x100 B, 8 in flight", rate, ""))
        # pull: sequential, 32 per request, over what is stored
        off = 0
        pulled = 0
        t0 = time.perf_counter()
        lat = []
        while time.perf_counter() - t0 < duration:
            ph = PullMessageRequestHeader(consumerGroup="bg", topic=TOPIC, queueId=0, queueOffset=off, maxMsgNums=32,
                                          sysFlag=4, commitOffset=0, suspendTimeoutMillis=0, subVersion=0,
                                          subscription="*")
            t1 = time.perf_counter()
            conn.s.sendall(_frame(request(RequestCode.PULL_MESSAGE, ph), 1))
            resp = conn.read_frame()
            lat.append(time.perf_counter() - t1)
            (hl,) = struct.unpack_from(">i", resp, 0)
            r = decode_command(resp)
            if r.code != 0:
                if r.code != 19:
                    print(f"# pull stopped at offset {off}: code {r.code} {r.remark} {r.ext_fields}", file=sys.stderr)
                break
            off = int(r.ext_fields["nextBeginOffset"])
            pulled += 32 if len(r.body) >= 32 * 150 else _count(r.body)
        rows.append(("pull 32, sync", pulled / (time.perf_counter() - t0), f"p50 {pct(lat, .5):.0f} µs per pull"))
        conn.s.close()
    finally:
        p.terminate()
        p.wait(30)
        shutil.rmtree(store, ignore_errors=True)
    return rows


def _count(body: bytes) -> int:
    n = pos = 0
    while pos < len(body):
        (size,) = struct.unpack_from(">i", body, pos)
        pos += size
        n += 1
    return n


def bench_redis(duration: float) -> list[tuple[str, float, str]] | str:
    exe = shutil.which("redis-server")
    if exe is None:
        return "redis-server not installed (apt-get install redis-server): Redis Streams skipped"
    try:
        import redis
    except ImportError:
        return "python package redis not installed: Redis Streams skipped"
    d = tempfile.mkdtemp(prefix="redis-bench-")
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    p = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                          "--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = []
    try:
        r = redis.Redis(port=port)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        lat = []
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < duration:
            t1 = time.perf_counter()
            r.xadd("s", {"b": BODY})
            lat.append(time.perf_counter() - t1)
            n += 1
        rows.append(("XADD 100 B, sync", n / (time.perf_counter() - t0), f"p50 {pct(lat, .5):.0f} µs"))
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < duration:
            pipe = r.pipeline(transaction=False)
            for _ in range(32):
                pipe.xadd("s", {"b": BODY})
            pipe.execute()
            n += 32
        rows.append(("XADD 100 B, pipelined by 32", n / (time.perf_counter() - t0), ""))
        r.xgroup_create("s", "g", id="0")
        t0 = time.perf_counter()
        n = 0
        while time.perf_counter() - t0 < duration:
            got = r.xreadgroup("g", "c", {"s": ">"}, count=32)
            if not got:
                break
            n += len(got[0][1])
        rows.append(("XREADGROUP COUNT 32", n / (time.perf_counter() - t0), ""))
        r.close()
    finally:
        p.terminate()
        p.wait(10)
        shutil.rmtree(d, ignore_errors=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--no-redis", action="store_true")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="broker setting for the shmq runs, e.g. messageIndexEnable=false")
    a = ap.parse_args()
    try:
        load = os.getloadavg()[0]
    except OSError:
        load = float("nan")
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; nproc {os.cpu_count()}; {cpu_model()}; "
          f"Python {platform.python_version()}; load average before {load:.2f}")
    print("| system | scenario | msgs/s | latency |")
    print("|---|---|---:|---|")
    for w in a.workers:
        label = f"shmq, {w} worker{'s' if w > 1 else ''}" + "".join(f", {kv}" for kv in a.set)
        for name, rate, note in bench_shmq(w, a.duration, a.set):
            print(f"| {label} | {name} | {rate:,.0f} | {note} |", flush=True)
    if not a.no_redis:
        rr = bench_redis(a.duration)
        if isinstance(rr, str):
            print(f"# {rr}")
        else:
            for name, rate, note in rr:
                print(f"| Redis Streams | {name} | {rate:,.0f} | {note} |", flush=True)


if __name__ == "__main__":
    main()
