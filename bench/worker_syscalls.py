#!/usr/bin/env python3
"""The broker worker's system calls per message of the sync-send + PushConsumer cycle (strace -c):

    .venv/bin/python bench/worker_syscalls.py [N] [--consumer]     # N sync sends (default 3000)

tcp_paths' consumer row (sync ``send()`` of 100 B + a PushConsumer process, one worker) with
``strace -c -f -p <worker>`` attached for the window of N sends; prints the futex, socket and
epoll calls per message (asyncio: sendto / recvfrom / epoll_wait; uvloop: write / read / epoll_pwait) (the worker's own appends make no FUTEX_WAKE when only its
pull-wake thread sleeps: RESULTS "Session 7, integrator"). ``--consumer``: the PushConsumer
process's calls instead, every call made at least once per 20 messages. Needs strace. Every process it starts
is stopped by pid; the store goes to a temp dir that is removed."""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import psutil  # noqa: E402
import tcp_paths as tp  # noqa: E402
import vs_rocketmq  # noqa: E402
from shmq import Message, Producer  # noqa: E402

CALLS = ("futex", "sendto", "recvfrom", "read", "write", "epoll_wait", "epoll_pwait")  # uvloop: read, write, epoll_pwait


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--consumer"]
    consumer = "--consumer" in sys.argv[1:]
    n = int(args[0]) if args else 3000
    work = Path(tempfile.mkdtemp(prefix="worker-syscalls-"))
    out = work / "strace.txt"
    pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", work / "store", 1)
    cons = None
    try:
        p = Producer("ws-pg", namesrv=pair.namesrv, local="never")
        p.start()
        tp.create_topic(pair.addr, pair.namesrv, "Live", 4)
        cons = subprocess.Popen([sys.executable, str(ROOT / "bench" / "tcp_paths.py"), "--consumer", pair.namesrv, "Live"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        cons.stdout.readline()
        time.sleep(3)  # its rebalance takes the queues
        worker = cons if consumer else psutil.Process(pair.procs[1].pid).children()[0]
        for _ in range(300):
            p.send(Message("Live", b"x" * 100))
        st = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(worker.pid)], stderr=subprocess.DEVNULL)
        time.sleep(1)
        for _ in range(n):
            p.send(Message("Live", b"x" * 100))
        st.terminate()
        st.wait()
        counts = {}
        for line in out.read_text().splitlines():
            parts = line.split()
            if len(parts) >= 5 and parts[3].isdigit() and (parts[-1] in CALLS or consumer):
                counts[parts[-1]] = int(parts[3])
        for name in sorted(counts, key=counts.get, reverse=True) if consumer else CALLS:
            if not consumer or counts[name] * 20 >= n:
                print(f"{name}: {counts.get(name, 0) / n:.2f} per message")
        cons.stdin.close()
        cons.stdout.readline()
        cons.wait(60)
        cons = None
        p.shutdown()
    finally:
        if cons is not None and cons.poll() is None:
            cons.kill()
        pair.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
