#!/usr/bin/env python3
"""The Python client's TCP paths over one connection, beside the machine's own TCP limit.

    .venv/bin/python bench/tcp_paths.py [--duration 3] [--rounds 1] [--workers 2] [--skip-e2e]

One run, in this order (100 B bodies, loopback, a shmq NameServer and broker started here):

* **limit**: a raw TCP round trip between two Python processes (a blocking echo server, a
  blocking client; a 200-byte frame each way, about a SEND_MESSAGE_V2 and its answer), and the
  same against an echo server on the event loop the broker uses (asyncio or uvloop): what one
  sync round trip can cost here before any broker work. Then the blocking echo once more with
  a third process "pulling" every echoed frame as a consumer does (a pull is answered with
  what arrived since the last one, or held until the next frame): the same round trip with
  one consumer round trip per message on the same cores, the limit beside the row below.
* **sync send()**: ``Producer(local="never").send`` in a loop, alone and then with a
  ``PushConsumer`` process (20 consume threads) taking the messages: msgs/s, call p50 / p99.
* **async / oneway / batch**: ``send_async`` with up to 2,000 in flight, ``send_oneway``
  (counted when the broker has stored them), ``send_batch`` of 32 (one in flight), and
  ``send_batch_async`` of 32 with 16 batches in flight (pipelined on the one connection): msgs/s.
* **e2e**: ``shmq-bench e2e --transport tcp`` (a paced 10,000 msgs/s, latency from each
  message's intended send time to the consumer) on its own broker, unless ``--skip-e2e``:
  with sync sends beside its ``tcp-limit`` row (the same pacing through a raw sync echo and
  a raw puller), then with ``--send-mode async`` and ``oneway``.

Every process it starts is stopped by pid; stores go to a temp dir that is removed.
"""
from __future__ import annotations

import argparse
import json
import os
import select
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from shmq import ConsumeResult, Message, Producer, PushConsumer  # noqa: E402
from shmq.bench.peers.shmq_client import create_topic  # noqa: E402
from shmq.protocol import RequestCode, SyncRemotingClient, loop as loops, request  # noqa: E402

BODY = b"x" * 100
FRAME = 200


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * q))] * 1e6


# ---------------------------------------------------------------- the limit --
def _echo_blocking(port_w) -> None:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    os.write(port_w, struct.pack("<I", srv.getsockname()[1]))
    c, _ = srv.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := c.recv(65536):
        c.sendall(data)


def _echo_loop(port_w) -> None:
    import asyncio

    class Echo(asyncio.Protocol):
        def connection_made(self, t):
            self.t = t
            t.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

        def data_received(self, data):
            self.t.write(data)

    async def main():
        srv = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
        os.write(port_w, struct.pack("<I", srv.sockets[0].getsockname()[1]))
        await asyncio.Event().wait()

    loops.run(main())


def echo_round_trips(kind: str, duration: float) -> tuple[float, list[float]]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the server process
        os.close(r)
        try:
            (_echo_blocking if kind == "blocking" else _echo_loop)(w)
        finally:
            os._exit(0)
    os.close(w)
    (port,) = struct.unpack("<I", os.read(r, 4))
    os.close(r)
    try:
        return _round_trips(socket.create_connection(("127.0.0.1", port)), duration)
    finally:
        os.kill(pid, 15)
        os.waitpid(pid, 0)


def _round_trips(s: socket.socket, duration: float) -> tuple[float, list[float]]:
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    msg = b"y" * FRAME
    lat: list[float] = []
    t_end = time.perf_counter() + duration
    warm = 500
    while True:
        t0 = time.perf_counter()
        s.sendall(msg)
        got = 0
        while got < FRAME:
            got += len(s.recv(65536))
        t1 = time.perf_counter()
        if warm:
            warm -= 1
            continue
        lat.append(t1 - t0)
        if t1 > t_end:
            break
    s.close()
    return len(lat) / sum(lat), lat


def _echo_with_puller(port_w) -> None:
    """The blocking echo server, which also serves a second connection's "pulls" as a broker
    does: a pull finds what was echoed since the last one (answered at once, all of it) or is
    held until the next echo. The cost of one consumer round trip per message, nothing else."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(2)
    os.write(port_w, struct.pack("<I", srv.getsockname()[1]))
    prod, _ = srv.accept()
    cons, _ = srv.accept()
    for c in (prod, cons):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    pending: list[bytes] = []
    held = False
    while True:
        ready, _, _ = select.select([prod, cons], [], [])
        if cons in ready:
            if not cons.recv(65536):
                return
            held = True
        if prod in ready:
            data = prod.recv(65536)
            if not data:
                return
            prod.sendall(data)
            pending.append(data)
        if held and pending:
            cons.sendall(b"".join(pending))
            pending.clear()
            held = False


def _puller(port: int) -> None:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    req = b"p" * FRAME
    while True:
        s.sendall(req)
        if not s.recv(65536):
            return


def echo_with_puller_round_trips(duration: float) -> tuple[float, list[float], str]:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            _echo_with_puller(w)
        finally:
            os._exit(0)
    os.close(w)
    (port,) = struct.unpack("<I", os.read(r, 4))
    os.close(r)
    s = socket.create_connection(("127.0.0.1", port))
    puller = os.fork()
    if puller == 0:
        try:
            _puller(port)
        finally:
            os._exit(0)
    try:
        procs = {"client": psutil.Process(), "echo server": psutil.Process(pid), "puller": psutil.Process(puller)}
        t0 = {k: sum(p.cpu_times()[:2]) for k, p in procs.items()}
        rate, lat = _round_trips(s, duration)
        n = len(lat) + 500  # the warm-up round trips are in the window too
        used = ", ".join(f"{k} {(sum(p.cpu_times()[:2]) - t0[k]) / n * 1e6:.0f} µs" for k, p in procs.items())
        return rate, lat, f"CPU/msg {used}"
    finally:
        for p in (puller, pid):
            os.kill(p, 15)
            os.waitpid(p, 0)


# ---------------------------------------------------------------- shmq paths --
def consumer_main(ns: str, topic: str, rebalance_s: float = 1.0) -> None:
    """The row's PushConsumer process (``--consumer NAMESRV TOPIC [REBALANCE_S]``)."""
    n = [0, 0]

    def listener(msgs):
        n[0] += len(msgs)
        n[1] += 1
        return ConsumeResult.SUCCESS
    c = PushConsumer("tcp-paths-cg", namesrv=ns, model="CLUSTERING", local="never", consume_from="LAST_OFFSET",
                     consume_batch_size=32, rebalance_interval=rebalance_s, consume_threads=20)
    c.subscribe(topic, "*")
    c.on_message(listener)
    c.start()
    print("started", flush=True)
    sys.stdin.read()
    print(n[0], n[1], flush=True)
    c.shutdown()


WARMUP = 300


SPIN_US = 100  # the spinning sync row's Producer(sync_spin_us=): about one quiet round trip


def sync_sends(p: Producer, topic: str, duration: float) -> tuple[float, list[float]]:
    for _ in range(WARMUP):
        p.send(Message(topic, BODY))
    lat: list[float] = []
    t_start = time.perf_counter()
    t_end = t_start + duration
    while True:
        t0 = time.perf_counter()
        p.send(Message(topic, BODY))
        t1 = time.perf_counter()
        lat.append(t1 - t0)
        if t1 > t_end:
            break
    return len(lat) / (time.perf_counter() - t_start), lat


def max_offsets(broker: str, topic: str, queues: int) -> int:
    with SyncRemotingClient(broker, timeout=5) as c:
        return sum(int(c.invoke(request(RequestCode.GET_MAX_OFFSET, topic=topic, queueId=q)).ext_fields["offset"])
                   for q in range(queues))


def windowed_sends(submit, per: int, duration: float, window: int) -> float:
    """Messages per second of ``submit()`` (a Future of ``per`` messages) with up to ``window``
    of them in flight on the one connection, every one waited for before the clock stops."""
    import collections
    inflight: collections.deque = collections.deque()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration:
        while len(inflight) < window:
            inflight.append(submit())
        inflight.popleft().result(10)
        n += per
    while inflight:
        inflight.popleft().result(10)
        n += per
    return n / (time.perf_counter() - t0)


def async_sends(p: Producer, topic: str, duration: float, window: int = 2000) -> float:
    """``send_async`` with up to ``window`` in flight, every one waited for before the clock stops.
    The loop a user would write (``bench/tcp_send_procs.py``'s): the send called directly and the
    clock read once every 100 sends. Through ``windowed_sends`` (a lambda, a clock read and a
    second window check a message) the harness's own loop cost the caller thread ~0.4 µs of its
    ~1.5 µs a message, and the caller's CPU is what the row's rate follows (its two threads share
    one GIL): bench/RESULTS.md, "Session 16, asyncgil16"."""
    import collections
    inflight: collections.deque = collections.deque()
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration:
        for _ in range(100):
            if len(inflight) >= window:
                inflight.popleft().result(10)
            inflight.append(p.send_async(Message(topic, BODY)))
        n += 100
    while inflight:
        inflight.popleft().result(10)
    return n / (time.perf_counter() - t0)


def oneway_sends(p: Producer, broker: str, topic: str, queues: int, duration: float) -> float:
    before = max_offsets(broker, topic, queues)
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration:
        for _ in range(100):
            p.send_oneway(Message(topic, BODY))
        n += 100
    while max_offsets(broker, topic, queues) - before < n and time.perf_counter() - t0 < duration + 30:
        time.sleep(0.01)
    return (max_offsets(broker, topic, queues) - before) / (time.perf_counter() - t0)


def batch_sends(p: Producer, topic: str, duration: float) -> float:
    n = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < duration:
        p.send_batch([Message(topic, BODY) for _ in range(32)])
        n += 32
    return n / (time.perf_counter() - t0)


def batch_async_sends(p: Producer, topic: str, duration: float, window: int = 16) -> float:
    """``send_batch_async`` of 32 with up to ``window`` batches in flight on the one connection."""
    return windowed_sends(lambda: p.send_batch_async([Message(topic, BODY) for _ in range(32)]), 32, duration, window)


def e2e_run(mode: str) -> list[dict]:
    """``shmq-bench e2e --transport tcp --send-mode mode``; with sync sends the tcp-limit row
    beside it (the same paced loop through a raw sync echo and a raw puller: the limit)."""
    peers = "tcp-limit" if mode == "sync" else "none"
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        proc = subprocess.run([sys.executable, "-m", "shmq.cli.bench", "e2e", "--transport", "tcp", "--peers", peers,
                               "--shmq", "shmq", "--send-mode", mode, "--no-progress", "--json", f.name],
                              capture_output=True, text=True)
        try:
            return json.load(open(f.name))["results"]
        except (OSError, ValueError, KeyError):
            print(f"# shmq-bench e2e failed: {proc.stderr[-500:]}")
            return []


E2E_MODES = ("sync", "async", "oneway")


def add_e2e_rows(add) -> None:
    for mode in E2E_MODES:
        for r in e2e_run(mode):
            lu, late, cpu = r.get("latency_us") or {}, r.get("pacing_late_us") or {}, r.get("cpu_us_per_msg") or {}
            who = "limit: raw sync echo + raw puller" if r["peer"] == "tcp-limit" else f"shmq, {mode} sends"
            add(f"e2e paced 10,000/s (shmq-bench), {who}: delivered", r.get("msgs_per_s") or 0,
                f"sent {r.get('send_msgs_per_s') or 0:,.0f}/s; p50 {lu.get('p50', '-')} µs, p99 "
                f"{lu.get('p99', '-')} µs; sends started late p50 {late.get('p50', '-')} µs; CPU µs/msg "
                f"prod/cons/server {cpu.get('producer')}/{cpu.get('consumer')}/{cpu.get('broker')}; "
                f"{r.get('note', '')}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--duration", type=float, default=3.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--skip-e2e", action="store_true")
    a = ap.parse_args()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; nproc {os.cpu_count()}; loop "
          f"{loops.loop_name()}; load average {os.getloadavg()[0]:.2f}", flush=True)
    rows: dict[str, list[tuple[float, str]]] = {}

    def add(name: str, rate: float, note: str = "") -> None:
        rows.setdefault(name, []).append((rate, note))
        print(f"#   {name}: {rate:,.0f}/s {note}", flush=True)

    work = Path(tempfile.mkdtemp(prefix="shmq-tcp-paths-"))
    try:
        run_rounds(a, work, add)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"# load average after {os.getloadavg()[0]:.2f}")
    print("| path (one connection, 100 B) | msgs/s (median) | latency, notes (each round) |")
    print("|---|---:|---|")
    for name, vals in rows.items():
        print(f"| {name} | {statistics.median(v for v, _ in vals):,.0f} | {' / '.join(n for _, n in vals)} |")


class CpuMeter:
    """CPU seconds of this process (the producer), the broker's supervisor and its workers,
    and a consumer, per message between its creation and ``per``."""

    def __init__(self, pair, consumer_pid: int | None = None):
        broker = psutil.Process(pair.procs[1].pid)
        self.procs = {"producer": [psutil.Process()], "supervisor": [broker], "workers": broker.children()}
        if consumer_pid is not None:
            self.procs["consumer"] = [psutil.Process(consumer_pid)]
        self.t0 = self._now()

    def _now(self) -> dict[str, float]:
        return {k: sum(sum(p.cpu_times()[:2]) for p in ps) for k, ps in self.procs.items()}

    def per(self, lat: list[float]) -> str:
        n = len(lat) + WARMUP  # sync_sends' warm-up sends are in the window too
        t1 = self._now()
        return "CPU/msg " + ", ".join(f"{k} {(t1[k] - self.t0[k]) / n * 1e6:.0f} µs" for k in t1)


def consumer_row(pair, p: Producer, live: str, queues: int, duration: float, add, label: str = "") -> None:
    """Sync sends while a PushConsumer process takes them. A topic of its own: a new group
    starts at offset 0 while the queue's start is in memory (RocketMQ's queryConsumerOffset
    does the same), so on the first topic the consumer would drain the row before instead of
    following the sends."""
    create_topic(pair.addr, pair.namesrv, live, queues)
    cons = subprocess.Popen([sys.executable, __file__, "--consumer", pair.namesrv, live],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    cons.stdout.readline()
    time.sleep(2.5)  # its rebalance takes the queues
    cpu = CpuMeter(pair, cons.pid)
    rate, lat = sync_sends(p, live, duration)
    used = cpu.per(lat)
    cons.stdin.close()
    took, calls = (int(x) for x in cons.stdout.readline().split())
    cons.wait(30)
    # listener calls = pull answers with messages (consume_batch_size 32 >= any pull)
    add(f"sync send(), a PushConsumer process taking them{label}", rate,
        f"p50 {pct(lat, .5):.0f} µs, p99 {pct(lat, .99):.0f} µs; consumer took {took:,} "
        f"({took / max(1, calls):.2f} per pull); {used}")


def run_rounds(a, work: Path, add) -> None:
    import vs_rocketmq  # the shmq NameServer + broker pair
    for rnd in range(a.rounds):
        for kind in ("blocking", "event loop"):
            rate, lat = echo_round_trips("blocking" if kind == "blocking" else "loop", a.duration)
            add(f"limit: raw TCP round trip, Python {kind} echo server", rate,
                f"p50 {pct(lat, .5):.0f} µs, p99 {pct(lat, .99):.0f} µs")
        rate, lat, used = echo_with_puller_round_trips(a.duration)
        add("limit: the blocking echo, and a raw puller taking each echoed frame", rate,
            f"p50 {pct(lat, .5):.0f} µs, p99 {pct(lat, .99):.0f} µs; {used}")
        pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", work / f"r{rnd}", a.workers)
        try:
            topic, queues = f"TcpPaths{rnd}", 4
            create_topic(pair.addr, pair.namesrv, topic, queues)
            p = Producer("tcp-paths-pg", namesrv=pair.namesrv, local="never")
            p.start()
            cpu = CpuMeter(pair)
            rate, lat = sync_sends(p, topic, a.duration)
            add("sync send(), alone", rate, f"p50 {pct(lat, .5):.0f} µs, p99 {pct(lat, .99):.0f} µs; {cpu.per(lat)}")
            spin = Producer("tcp-paths-spin", namesrv=pair.namesrv, local="never", sync_spin_us=SPIN_US)
            spin.start()
            cpu = CpuMeter(pair)
            rate, lat = sync_sends(spin, topic, a.duration)
            polling = f", polling {SPIN_US} µs for the answer (sync_spin_us)"
            add(f"sync send(), alone{polling}", rate,
                f"p50 {pct(lat, .5):.0f} µs, p99 {pct(lat, .99):.0f} µs; {cpu.per(lat)}")
            consumer_row(pair, p, f"{topic}Live", queues, a.duration, add)
            consumer_row(pair, spin, f"{topic}Spin", queues, a.duration, add, polling)
            spin.shutdown()
            add("send_async(), 2,000 in flight", async_sends(p, topic, a.duration))
            add("send_oneway() (stored)", oneway_sends(p, pair.addr, topic, queues, a.duration))
            add("send_batch() of 32", batch_sends(p, topic, a.duration))
            add("send_batch_async() of 32, 16 batches in flight", batch_async_sends(p, topic, a.duration))
            p.shutdown()
        finally:
            pair.stop()
        if not a.skip_e2e:
            add_e2e_rows(add)
if __name__ == "__main__":
    if sys.argv[1:2] == ["--consumer"]:
        consumer_main(sys.argv[2], sys.argv[3], *map(float, sys.argv[4:5]))
    else:
        main()
