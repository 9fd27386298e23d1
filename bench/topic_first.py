"""What a TCP producer's first sends to new topics cost, round by round over N topics of 8
queues (one broker worker): the topic's first send, the first send to its next queue (the
producer's first *plain* send to the topic: the C sync path's route and every queue's frame
templates are made then, client/oneway.py ``_targets``), the third queue's first, and a plain
send after six more rounds; each round's p50 and each process's CPU a send (psutil, 10 ms ticks:
coarse, and it counts the processes' background threads over the round's wall time). The routes
are fetched before the clock (what a user's first send waits for, a NameServer round trip and
what the producer makes when a route arrives: Producer._route_arrived); their p50 is printed first.

    PYTHONPATH=. .venv/bin/python bench/topic_first.py [TOPICS]     # default 100; TF_PROFILE=1: cProfile of round 2
"""
from __future__ import annotations

import cProfile
import os
import pstats
import statistics
import sys
import time

import psutil

from shmq.bench.services import Env
from shmq.client import Message, Producer
from shmq.client.admin import Admin

BODY = b"x" * 100

ROUNDS = ["topic's first send", "second send (the next queue's first)", "third send (its first)",
          "plain (after 6 more rounds)"]


def cpu(procs) -> dict:
    out = {}
    for c in procs:
        try:
            t = c.cpu_times()
            out[c.pid] = (" ".join(c.cmdline()[1:3])[:30], t.user + t.system)
        except psutil.Error:
            pass
    return out


def main(n: int) -> None:
    with Env(workers=1) as env:
        ns, broker = env.namesrv(), env.broker()
        names = [f"TF{i:05d}" for i in range(n + 1)]
        with Admin(ns) as adm:
            for t in names:
                adm.create_topic(t, 8, broker_addr=broker)
        time.sleep(1.5)  # one registration period: the NameServer routes every topic
        p = Producer("tf", ns, local="never").start()
        try:
            fetch, fetch_cpu = [], []
            for t in names:
                a, c = time.perf_counter(), time.thread_time()
                p._publish_info(t)  # the routes, before the clock
                fetch_cpu.append(time.thread_time() - c)
                fetch.append(time.perf_counter() - a)
            print(f"route fetch (before the clock): p50 {statistics.median(fetch) * 1e6:.0f} us, the calling "
                  f"thread's CPU p50 {statistics.median(fetch_cpu) * 1e6:.0f} us")
            p.send(Message(names[0], BODY))  # the connection, before the clock
            me = psutil.Process()
            procs = [me, *me.children(recursive=True)]
            for rnd, label in enumerate(ROUNDS):
                if rnd == 3:
                    for _ in range(6):
                        for t in names[1:]:
                            p.send(Message(t, BODY))
                prof = cProfile.Profile() if rnd == 1 and os.environ.get("TF_PROFILE") else None
                lat = []
                c0 = cpu(procs)
                if prof:
                    prof.enable()
                for t in names[1:]:
                    a = time.perf_counter()
                    p.send(Message(t, BODY))
                    lat.append(time.perf_counter() - a)
                if prof:
                    prof.disable()
                    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
                c1 = cpu(procs)
                per = {name: round((c - c0[pid][1]) / len(lat) * 1e6) for pid, (name, c) in c1.items() if pid in c0}
                print(f"{label}: p50 {statistics.median(lat) * 1e6:.0f} us; CPU us a send {per}")
        finally:
            p.shutdown()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 100)
