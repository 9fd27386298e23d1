#!/usr/bin/env python3
"""Which broker worker serves the producer's and which the consumer's connection, per run of
tcp_paths' sync ``send()`` + PushConsumer row (``bench/tcp_consumer_row.py``), beside the row's
figures. With more than one worker the kernel's SO_REUSEPORT hash of each connection's ports
places them: on one worker the held pull is answered in the send's own read callback
(``PullHolds.appended_in_read``), on two the appending worker writes the holder's eventfd and the
holder wakes for it (a read and a wake-up more a message; bench/RESULTS.md "Session 16, worker16").

    .venv/bin/python bench/worker_placement.py [--runs 6] [--workers 0] [--duration 3]
    # another tree: cd <tree> && PYTHONPATH=<tree> <this tree>/.venv/bin/python <this tree>/bench/worker_placement.py

Each run starts ``bench/tcp_consumer_row.py WORKERS 1 DURATION`` from the tree in the current
directory; once its consumer process is up it reads every process's TCP connections
(psutil, /proc: no ptrace, nothing in the row's path) and matches the row process's and the
consumer's connections to the broker's listen ports against each worker's accepted ones, by
port pair. Only the row's own processes are looked at (its children), so other brokers on the
machine do not count. Prints one line a run: the placement and the row's own line."""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import psutil


def _tcp(p: psutil.Process) -> list:
    try:
        return [c for c in p.net_connections(kind="tcp") if c.raddr and c.status == psutil.CONN_ESTABLISHED]
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def placement(row: psutil.Process) -> dict | None:
    """{"producer": worker pid, "consumer": worker pid, "workers": [pids]} of the row's broker,
    or None while the consumer or the workers are not up yet."""
    kids = row.children(recursive=True)
    workers = broker_workers(kids)
    consumer = next((p for p in kids if "--consumer" in _cmd(p)), None)
    if not workers or consumer is None:
        return None
    return serving(workers, {"producer": row, "consumer": consumer})


def broker_workers(procs: list[psutil.Process]) -> list[psutil.Process]:
    """The broker worker processes among ``procs`` (e.g. a broker supervisor's children)."""
    return [p for p in procs if "shmq.broker.worker.main" in " ".join(_cmd(p))]


def serving(workers: list[psutil.Process], clients: dict[str, psutil.Process]) -> dict | None:
    """{"workers": [pids], name: the pid of the worker serving that client process, ...,
    "conns": {name: (the worker's port, the client's port)}}, or None while a client has no
    connection to a worker. A client process with several connections to the broker (admin,
    the VIP port) is placed by its busiest one (the most segments the worker took in): the one
    carrying its sends or pulls."""
    # each worker's accepted connections by (its port, the client's port)
    served = {(c.laddr.port, c.raddr.port): w.pid for w in workers for c in _tcp(w)}
    out: dict = {"workers": sorted(w.pid for w in workers), "conns": {}}
    sent = segs_in()
    for name, proc in clients.items():
        conns = [(c.raddr.port, c.laddr.port) for c in _tcp(proc) if (c.raddr.port, c.laddr.port) in served]
        if not conns:
            return None
        key = out["conns"][name] = max(conns, key=lambda k: sent.get(k, 0))
        out[name] = served[key]
    return out


def segs_in() -> dict[tuple[int, int], int]:
    """Every established loopback TCP socket's data segments taken in (``ss -ti``), by its
    (local port, peer port): on a worker's socket, what its client sent."""
    return parse_ss(subprocess.run(["ss", "-tinH", "state", "established"], capture_output=True, text=True).stdout)


def parse_ss(text: str) -> dict[tuple[int, int], int]:
    """``ss -tinH state established``'s text to {(local port, peer port): data_segs_in}."""
    out, key = {}, None
    for line in text.splitlines():
        if not line.startswith(("\t", " ")):
            f = line.split()
            key = (int(f[2].rsplit(":", 1)[1]), int(f[3].rsplit(":", 1)[1])) if len(f) >= 4 else None
        elif key is not None and "data_segs_in:" in line:
            out[key] = int(line.split("data_segs_in:", 1)[1].split()[0])
    return out


def _cmd(p: psutil.Process) -> list[str]:
    try:
        return p.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []


def one_run(workers: int, duration: float) -> str:
    row = subprocess.Popen([sys.executable, "bench/tcp_consumer_row.py", str(workers), "1", str(duration)],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    ps, seen = psutil.Process(row.pid), None
    try:
        deadline = time.monotonic() + 60
        while seen is None and row.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            seen = placement(ps)
        time.sleep(1.0)  # (the consumer is up 2.5 s before the sends: look again once they run)
        seen = placement(ps) or seen
        out = row.communicate(timeout=120)[0].strip().splitlines()
    finally:
        if row.poll() is None:
            row.kill()
    line = out[-1].split(" ", 1)[-1] if out else "(no row line)"
    if seen is None:
        return f"placement not seen; {line}"
    idx = {pid: i + 1 for i, pid in enumerate(seen["workers"])}
    prod, cons = idx[seen["producer"]], idx[seen["consumer"]]
    where = "same worker" if prod == cons else "different workers"
    return f"{len(idx)} worker(s), producer's sends on worker {prod}, consumer on {cons}: {where}; {line}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=6)
    ap.add_argument("--workers", type=int, default=0, help="0: the broker's default (as tcp_paths)")
    ap.add_argument("--duration", type=float, default=3.0)
    a = ap.parse_args()
    for i in range(a.runs):
        load = os.getloadavg()[0]
        print(f"{time.strftime('%H:%M:%S', time.gmtime())} load {load:.2f} run {i + 1}: "
              f"{one_run(a.workers, a.duration)}", flush=True)


if __name__ == "__main__":
    main()
