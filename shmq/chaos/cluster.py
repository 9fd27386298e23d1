"""The servers of a chaos run: one NameServer, one broker (supervisor + workers) and its
slaves, started through :class:`shmq.bench.services.Env` (which owns the temp root, stops
every process by pid and unlinks every shared-memory segment whatever happens).

A broker is restarted on its own store and its own port, so its clients find it again at
the address they know. The kills are by pid, on processes this run started: one worker, the
supervisor alone (its workers then see the control channel close and leave by themselves),
or the whole broker at once (supervisor and workers, as when the host's broker dies).
"serving" is a probe: a send over a new TCP connection answered SEND_OK, repeated on new
connections until every worker has answered one (SO_REUSEPORT spreads connections), so a
killed worker counts as recovered only when its replacement serves.
"""
from __future__ import annotations

import os
import signal
import sys
import time

import psutil

from shmq.bench.services import Env, ServiceUnavailable
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import KVTable, decode_json
from shmq.protocol.wire import create_topic, send

BROKER_READY = r"shmq-broker listening on (\S+):(\d+) \(vip \d+, (\d+) workers"
PROBE_TOPIC = "ChaosProbe"

#: short intervals (nothing waits for RocketMQ's 10 s scans) and no disk-pressure expiry or
#: start-up segment gc (other stores on the host are none of this run's business)
SETTINGS = {
    "mappedFileSizeCommitLog": 16 * 1024 * 1024,
    "registerNameServerPeriod": 1000,
    "flushConsumerOffsetInterval": 500,
    "clientScanInterval": 500,
    "channelExpiredTimeout": 4000,
    "maxHashSlotNum": 4096,
    "maxIndexNum": 65536,
    "shutdownGraceMillis": 1000,
    "diskMaxUsedSpaceRatio": 95,
    "segmentGcOnStart": "false",
    "haSendHeartbeatInterval": 500,
    "slaveSynchronizeInterval": 500,
}


class Node:
    """One broker process tree: its store and port stay across restarts."""

    def __init__(self, name: str, store: str, settings: dict):
        self.name, self.store, self.settings = name, store, settings
        self.port = 0
        self.workers = 0
        self.popen = None
        self.starts = 0

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def worker_pids(self) -> list[int]:
        try:
            return sorted(c.pid for c in psutil.Process(self.popen.pid).children()
                          if c.status() != psutil.STATUS_ZOMBIE)
        except (psutil.NoSuchProcess, AttributeError):
            return []


class Cluster:
    def __init__(self, env: Env, flush: str, *, workers: int = 2, slaves: int = 0,
                 master_role: str = "SYNC_MASTER", settings: dict | None = None):
        self.env = env
        self.workers = workers
        base = {**SETTINGS, **(settings or {}), "flushDiskType": flush, "brokerName": "chaos"}
        role = master_role if slaves else "ASYNC_MASTER"
        self.master = Node("master", os.path.join(env.socket_dir(), "store"), {**base, "brokerRole": role})
        self.slaves = [Node(f"slave{i}", os.path.join(env.socket_dir(), "store"),
                            {**base, "brokerRole": "SLAVE", "brokerId": i}) for i in range(1, slaves + 1)]
        self.namesrv = ""

    @property
    def nodes(self) -> list[Node]:
        return [self.master] + self.slaves

    def start(self, topic: str, queues: int) -> None:
        self.namesrv = self.env.namesrv()
        for n in self.nodes:
            self.env.track_store(n.store)
            self.start_node(n)
        with SyncRemotingClient(self.master.addr, timeout=5) as c:
            for t, q in ((topic, queues), (PROBE_TOPIC, 1)):
                r = create_topic(c, t, q)
                if r.code != 0:
                    raise ServiceUnavailable(f"cannot create topic {t}: {r.remark}")

    def start_node(self, n: Node) -> None:
        argv = [sys.executable, "-m", "shmq.cli.broker",
                "--port", str(n.port), "--store", n.store, "--namesrv", self.namesrv,
                "--workers", str(self.workers), "--log-level", "WARNING"]
        for k, v in n.settings.items():
            argv += ["--set", f"{k}={v}"]
        n.starts += 1
        for attempt in range(3):
            try:
                n.popen, m = self.env.spawn(argv, BROKER_READY, f"{n.name}-{n.starts}-{attempt}.log", timeout=90)
                break
            except ServiceUnavailable:
                if attempt == 2:
                    raise
                time.sleep(0.5)   # the port pair may still be held by a dying process: try again
        n.port, n.workers = int(m.group(2)), int(m.group(3))

    # ---- kills (by pid, processes this run started) ----------------------------------
    def kill_worker(self, n: Node, pick) -> int:
        pids = n.worker_pids()
        pid = pick(pids)
        os.kill(pid, signal.SIGKILL)
        return pid

    def kill_supervisor(self, n: Node) -> int:
        """kill -9 the supervisor alone; its workers leave when the control channel closes.
        Returns how many had to be killed because they were still there after 10 s."""
        pids = n.worker_pids()
        self._reap(n, signal.SIGKILL)
        return len(_wait_gone(pids, 10.0))

    def kill_broker(self, n: Node) -> None:
        pids = n.worker_pids()
        os.kill(n.popen.pid, signal.SIGKILL)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reap(n, None)
        _wait_gone(pids, 5.0)

    def stop_node(self, n: Node) -> None:
        """A clean stop (SIGTERM: flush, checkpoint, offsets, ``abort`` removed)."""
        pids = n.worker_pids()
        self.env.stop_process(n.popen.pid, timeout=30)
        _wait_gone(pids, 10.0)

    def _reap(self, n: Node, sig) -> None:
        if sig is not None:
            os.kill(n.popen.pid, sig)
        n.popen.wait()
        if n.popen.stdout:
            n.popen.stdout.close()
        self.env.untrack_process(n.popen.pid)

    # ---- serving ---------------------------------------------------------------------
    def serving(self, n: Node, timeout: float) -> bool:
        """True once a probe send answered SEND_OK on connections served by every worker."""
        deadline = time.monotonic() + timeout
        seen: set[int] = set()
        while time.monotonic() < deadline:
            try:
                with SyncRemotingClient(n.addr, timeout=2) as c:
                    info = c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO))
                    wid = int(decode_json(info.body, KVTable).table.get("shmqWorkerId", 0))
                    if n.settings.get("brokerRole") == "SLAVE" or send(c, PROBE_TOPIC, b"probe", timeout=2).code == 0:
                        seen.add(wid)
            except Exception:  # noqa: BLE001 - refused, reset, timed out: not serving yet
                time.sleep(0.02)
            if len(seen) >= max(1, len(n.worker_pids())) and len(n.worker_pids()) >= n.workers:
                return True
        return False


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    """Wait for ``pids`` to exit; SIGKILL those still running after ``timeout`` (returned)."""
    deadline = time.monotonic() + timeout
    left = list(pids)
    while left and time.monotonic() < deadline:
        left = [p for p in left if _running(p)]
        if left:
            time.sleep(0.02)
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
