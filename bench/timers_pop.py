#!/usr/bin/env python3
"""Timer messages and POP on one broker (2 workers) and a NameServer this script starts.

    .venv/bin/python bench/timers_pop.py [--pending 1000000] [--rate 10000] [--seconds 10] [--pop 20000]

1. ``--pending`` timers due at random over the next hour (well after the run ends), sent by a
   local producer: the broker's RSS (supervisor + workers) before and after, and its CPU
   while idle with them pending (30 s).
2. ``--rate`` timers a second due during ``--seconds`` seconds (sent before the first is
   due): lateness of each firing, the delivered record's store time minus the time asked
   (p50 / p99 / max), and whether any fired early.
3. ``--pop`` messages consumed by a SimpleConsumer (POP: receive 32, ack each) and the same
   number by a PullConsumer, over TCP, one after the other in the same run: msgs/s.
"""
from __future__ import annotations

import argparse
import os
import platform
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time

import psutil

from shmq import Message, Producer, PullConsumer, SimpleConsumer
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import CreateTopicRequestHeader, PullMessageRequestHeader
from shmq.message.record import iter_records


def start(argv: list[str], pattern: str) -> tuple[subprocess.Popen, re.Match]:
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    line = p.stdout.readline().decode()
    m = re.search(pattern, line)
    if not m:
        p.kill()
        raise SystemExit(f"{argv[2]} did not start: {line!r}")
    return p, m


def tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


def rss_mib(pid: int) -> float:
    """Resident memory not shared with the store's mapped files (RSS - shared pages)."""
    return sum(q.memory_info().rss - q.memory_info().shared for q in tree(pid)) / 2 ** 20


def cpu_s(pid: int) -> float:
    return sum(sum(q.cpu_times()[:2]) for q in tree(pid))


def create_topic(addr: str, topic: str, queues: int) -> None:
    with SyncRemotingClient(addr, timeout=10) as c:
        h = CreateTopicRequestHeader(topic=topic, defaultTopic="TBW102", readQueueNums=queues,
                                     writeQueueNums=queues, perm=6, topicFilterType="SINGLE_TAG")
        assert c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h)).code == 0


def pending(p: Producer, pid: int, n: int) -> None:
    base = rss_mib(pid)
    now = int(time.time() * 1000)
    t0 = time.monotonic()
    for i in range(n):
        p.send(Message("BenchFar", b"x" * 64, deliver_at=now + 600_000 + random.randrange(3_600_000)))
    sent = time.monotonic() - t0
    time.sleep(10)                                   # the wheel ingests them
    c0, w0 = cpu_s(pid), time.monotonic()
    time.sleep(30)
    idle = 100.0 * (cpu_s(pid) - c0) / (time.monotonic() - w0)
    print(f"| {n:,} pending timers (due over an hour) | sent in {sent:.1f} s ({n / sent:,.0f}/s) "
          f"| private RSS {base:.0f} -> {rss_mib(pid):.0f} MiB | idle CPU {idle:.1f}% of one core |")


def pull_all(addr: str, topic: str, queues: int, want: int, timeout: float) -> list:
    out, offs = [], [0] * queues
    deadline = time.monotonic() + timeout
    with SyncRemotingClient(addr, timeout=10) as c:
        while len(out) < want and time.monotonic() < deadline:
            moved = False
            for q in range(queues):
                h = PullMessageRequestHeader(consumerGroup="bench", topic=topic, queueId=q, queueOffset=offs[q],
                                             maxMsgNums=32, sysFlag=4, commitOffset=0, suspendTimeoutMillis=0,
                                             subVersion=0, subscription="*")
                r = c.invoke(request(RequestCode.PULL_MESSAGE, h))
                if r.code == 0:
                    out += list(iter_records(r.body))
                    offs[q] = int(r.ext_fields["nextBeginOffset"])
                    moved = True
            if not moved:
                time.sleep(0.05)
    return out


def lateness(p: Producer, addr: str, rate: int, seconds: int) -> None:
    n = rate * seconds
    probe, t0 = 2000, time.monotonic()               # how fast this machine sends timers now
    for _ in range(probe):
        p.send(Message("BenchFar", b"y" * 64, delay=7200))
    lead = 5 + 1.5 * n * (time.monotonic() - t0) / probe   # every send lands before the first is due
    start_ms = int((time.time() + lead) * 1000)
    t0 = time.monotonic()
    for i in range(n):
        due = start_ms + (i * 1000) // rate
        p.send(Message("BenchDue", b"y" * 64, deliver_at=due, properties={"ASKED": str(due)}))
    sent = time.monotonic() - t0
    got = pull_all(addr, "BenchDue", 4, n, lead + seconds + 120)
    late = sorted(m.store_timestamp - int(m.properties["ASKED"]) for m in got)
    print(f"| {rate:,}/s due for {seconds} s ({n:,}; sent in {sent:.1f} s, lead {lead:.0f} s) | delivered {len(got):,} "
          f"| lateness p50 {statistics.median(late):.0f} ms, p99 {late[int(len(late) * 0.99)]} ms, max {late[-1]} ms "
          f"| early: {sum(x < 0 for x in late)} |")


def pop_vs_pull(p: Producer, ns: str, n: int) -> None:
    for i in range(0, n, 32):
        p.send_batch([Message("BenchPop", b"z" * 100) for _ in range(min(32, n - i))])
    rates = {}
    for mode in ("ack each", "ack_batch"):
        group = "bench-pop-" + mode.replace(" ", "-")
        with SimpleConsumer(group, ns).subscribe("BenchPop") as sc:
            t0, got = time.monotonic(), 0
            while got < n:
                msgs = sc.receive(32, invisible_duration=60, await_duration=2)
                if mode == "ack_batch":
                    sc.ack_batch(msgs)
                else:
                    for m in msgs:
                        sc.ack(m)
                got += len(msgs)
            rates[mode] = got / (time.monotonic() - t0)
    pc = PullConsumer("bench-pull", ns, local="never", consume_from="FIRST_OFFSET")
    pc.subscribe("BenchPop", "*")
    with pc.start():
        t0, got = time.monotonic(), 0
        while got < n:
            got += len(pc.poll(2.0))
        pull_rate = got / (time.monotonic() - t0)
    print(f"| {n:,} x 100 B over TCP | POP receive(32) + ack each: {rates['ack each']:,.0f} msgs/s "
          f"| POP receive(32) + ack_batch: {rates['ack_batch']:,.0f} msgs/s "
          f"| PullConsumer poll: {pull_rate:,.0f} msgs/s | POP/pull {rates['ack_batch'] / pull_rate:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--pending", type=int, default=1_000_000)
    ap.add_argument("--rate", type=int, default=10_000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--pop", type=int, default=20_000)
    a = ap.parse_args()
    store = tempfile.mkdtemp(prefix="shmq-bench-timers-")
    ns, m = start([sys.executable, "-m", "shmq.cli.namesrv", "--port", "0"], r"(127\.0\.0\.1:\d+)")
    ns_addr = m.group(1)
    br, m = start([sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", store, "--workers", "2",
                   "--namesrv", ns_addr, "--log-level", "WARNING", "--set", "mappedFileSizeCommitLog=268435456",
                   "--set", "diskMaxUsedSpaceRatio=95", "--set", "registerNameServerPeriod=1000",
                   # a name of its own: a stale broker elsewhere on this host may find our NameServer's port
                   "--set", f"brokerName=bench-timers-{os.getpid()}"],
                  r"listening on (127\.0\.0\.1:\d+)")
    addr = m.group(1)
    try:
        for t in ("BenchFar", "BenchDue", "BenchPop"):
            create_topic(addr, t, 4)
        time.sleep(2.5)                              # the route reaches the NameServer
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; nproc {os.cpu_count()}; "
              f"Python {platform.python_version()}; load average before {os.getloadavg()[0]:.2f}")
        with Producer("bench-timer", ns_addr, local="always") as p:
            if a.pending:
                pending(p, br.pid, a.pending)
            if a.rate:
                lateness(p, addr, a.rate, a.seconds)
            if a.pop:
                pop_vs_pull(p, ns_addr, a.pop)
    finally:
        for proc in (br, ns):
            proc.terminate()
            proc.wait(30)


if __name__ == "__main__":
    main()
