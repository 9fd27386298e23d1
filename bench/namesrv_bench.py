#!/usr/bin/env python3
"""Route queries per second and latency against a shmq-namesrv this script starts itself.

    .venv/bin/python bench/namesrv_bench.py [--duration 5] [--connections 1 8] [--version 121]

Two brokers (8 queues each) register a topic; then, for each connection count C, C client
processes each keep one connection and ask GET_ROUTEINFO_BY_TOPIC in a closed loop (send,
wait for the answer, repeat) for ``--duration`` seconds after a warm-up. Latency is measured
per request in the client (send to last byte of the answer). Clients are processes with
blocking sockets and pre-encoded requests, so the client side costs as little as possible;
on a small machine they still share the CPUs with the server, which the results say.
"""
from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import re
import socket
import struct
import subprocess
import sys
import time

from shmq.message.layout import masked_crc32
from shmq.protocol import RequestCode, SyncRemotingClient, decode_command, encode_command, request
from shmq.protocol.bodies import RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper, encode_register_body
from shmq.protocol.headers import RegisterBrokerRequestHeader

TOPIC = "BenchTopic"


def start_namesrv() -> tuple[subprocess.Popen[bytes], str]:
    p = subprocess.Popen([sys.executable, "-m", "shmq.cli.namesrv", "--port", "0", "--log-level", "WARNING"],
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    line = p.stdout.readline().decode()  # type: ignore[union-attr]
    m = re.search(r"listening on (127\.0\.0\.1:\d+) \((\w+)\)", line)
    if not m:
        p.kill()
        raise SystemExit(f"shmq-namesrv did not start: {line!r}")
    return p, f"{m.group(1)} {m.group(2)}"


def register_brokers(addr: str) -> list[SyncRemotingClient]:
    clients = []
    for i, name in enumerate(("broker-a", "broker-b")):
        body = encode_register_body(RegisterBrokerBody(topicConfigSerializeWrapper=TopicConfigSerializeWrapper(
            topicConfigTable={TOPIC: TopicConfig(topicName=TOPIC, readQueueNums=8, writeQueueNums=8)})))
        h = RegisterBrokerRequestHeader(brokerName=name, brokerAddr=f"127.0.0.1:{10911 + 10 * i}",
                                        clusterName="DefaultCluster", haServerAddr="", brokerId=0,
                                        bodyCrc32=masked_crc32(body))
        c = SyncRemotingClient(addr)
        assert c.invoke(request(RequestCode.REGISTER_BROKER, h, body)).code == 0
        clients.append(c)
    return clients


def _recv_exact(sock: socket.socket, n: int, buf: bytearray) -> None:
    del buf[:]
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk


def worker(addr: str, frame: bytes, warmup: float, duration: float, start_at: float, out: "mp.Queue") -> None:
    host, port = addr.split(":")
    sock = socket.create_connection((host, int(port)))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    buf = bytearray()
    lat: list[int] = []
    now = time.perf_counter
    while time.time() < start_at:
        time.sleep(0.001)
    t_warm = now() + warmup
    t_end = t_warm + duration
    first = True
    while True:
        t0 = now()
        if t0 >= t_end:
            break
        sock.sendall(frame)
        _recv_exact(sock, 4, buf)
        (n,) = struct.unpack(">i", buf)
        _recv_exact(sock, n, buf)
        t1 = now()
        if first:
            resp = decode_command(bytes(buf))
            assert resp.code == 0 and resp.body, resp
            first = False
        if t0 >= t_warm:
            lat.append(int((t1 - t0) * 1e9))
    sock.close()
    out.put(lat)


def run(addr: str, conns: int, warmup: float, duration: float, version: int) -> dict[str, float]:
    cmd = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)
    cmd.version, cmd.opaque, cmd.language = version, 1, "JAVA"
    frame = encode_command(cmd)
    ctx = mp.get_context("spawn")
    q: mp.Queue = ctx.Queue()
    start_at = time.time() + 1.0
    procs = [ctx.Process(target=worker, args=(addr, frame, warmup, duration, start_at, q)) for _ in range(conns)]
    for p in procs:
        p.start()
    lats: list[int] = []
    for _ in procs:
        lats += q.get(timeout=warmup + duration + 60)
    for p in procs:
        p.join()
    lats.sort()

    def pct(p: float) -> float:
        return lats[min(len(lats) - 1, int(p * len(lats)))] / 1000.0

    return {"connections": conns, "requests": len(lats), "qps": len(lats) / duration,
            "p50_us": pct(0.50), "p99_us": pct(0.99), "p999_us": pct(0.999), "max_us": lats[-1] / 1000.0}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--duration", type=float, default=5.0, help="measured seconds per run (default 5)")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds first (default 1)")
    ap.add_argument("--connections", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeat", type=int, default=3, help="runs per connection count; the median (by qps) is shown")
    ap.add_argument("--version", type=int, default=121,
                    help="request version: 121 like ali-ons (bare-key JSON), 409 like Java 4.9.8 (standard JSON)")
    args = ap.parse_args()
    ns, info = start_namesrv()
    addr, loop = info.split()
    brokers = register_brokers(addr)
    try:
        body_len = len(SyncRemotingClient(addr).invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)).body)
        print(f"# shmq-namesrv on {addr} ({loop} loop); route body {body_len} bytes; request version {args.version}")
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; nproc {os.cpu_count()}; {cpu_model()}; "
              f"Python {platform.python_version()}; load average before {os.getloadavg()[0]:.2f}")
        print("| connections | route queries/s | p50 µs | p99 µs | p99.9 µs | max µs |")
        print("|---:|---:|---:|---:|---:|---:|")
        for c in args.connections:
            runs = sorted((run(addr, c, args.warmup, args.duration, args.version) for _ in range(args.repeat)),
                          key=lambda r: r["qps"])
            r = runs[len(runs) // 2]
            print(f"| {c} | {r['qps']:,.0f} | {r['p50_us']:.0f} | {r['p99_us']:.0f} | {r['p999_us']:.0f} | {r['max_us']:.0f} |",
                  flush=True)
    finally:
        ns.terminate()
        ns.wait(10)
        if ns.stdout:
            ns.stdout.close()
        for b in brokers:
            b.close()


if __name__ == "__main__":
    main()
