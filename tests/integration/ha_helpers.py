"""Master/slave fixtures for the replication tests: a pair of shmq-broker processes with the
same brokerName under one NameServer, a TCP proxy to cut the HA link, and wire helpers."""
from __future__ import annotations

import socket
import threading
import time

import pytest

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import KVTable, decode_json

from shmq.protocol.wire import pull_all  # noqa: F401 (the tests import it from here)

HA_SETTINGS = {"haSendHeartbeatInterval": 500, "slaveSynchronizeInterval": 500,
               "registerNameServerPeriod": 1000}


def wait_until(cond, timeout: float = 20.0, what: str = "condition", step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = cond()
        if v:
            return v
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")


def wait_slave_knows(addr: str, topic: str) -> None:
    """Wait until the slave at ``addr`` has copied ``topic`` from its master's table (every
    slaveSynchronizeInterval, as in RocketMQ): before that it answers TOPIC_NOT_EXIST to a pull
    although the replicated records are in its store."""
    from shmq.protocol import ResponseCode
    from shmq.protocol.wire import pull
    with SyncRemotingClient(addr, timeout=10) as c:
        wait_until(lambda: pull(c, topic, 0, 0).code != ResponseCode.TOPIC_NOT_EXIST,
                   what=f"the slave to learn {topic}")


def commit_pos(addr: str) -> int:
    """The broker's CommitLog end (GET_BROKER_RUNTIME_INFO's commitLogMaxOffset); -1 while the
    broker cannot tell yet (an Apache RocketMQ broker still starting answers with no body)."""
    with SyncRemotingClient(addr, timeout=5) as c:
        r = c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO))
    if r.code != 0 or not r.body:
        return -1
    return int(decode_json(r.body, KVTable).table["commitLogMaxOffset"])


def ha_port(addr: str) -> int:
    """The master's HA port (listenPort + 1 unless that was taken when it started)."""
    with SyncRemotingClient(addr, timeout=5) as c:
        t = decode_json(c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).body, KVTable).table
    return int(t["shmqHaListenPort"])


@pytest.fixture
def start_pair(start_broker, namesrv):
    """start_pair(role, name=..., slave_settings=..., **master_settings) -> (master, slave)."""
    counter = iter(range(100))

    def start(role: str = "ASYNC_MASTER", *, name: str | None = None, settings: dict | None = None,
              slave_settings: dict | None = None, master_store=None, slave_store=None):
        name = name or f"pair-{next(counter)}"
        base = {**HA_SETTINGS, "brokerName": name, **(settings or {})}
        m = start_broker(namesrv, settings={**base, "brokerRole": role}, store=master_store)
        s = start_broker(namesrv, settings={**base, "brokerRole": "SLAVE", "brokerId": 1,
                                            **(slave_settings or {})}, store=slave_store)
        return m, s

    return start


class Proxy:
    """A TCP proxy on loopback between a slave and its master's HA port; ``cut()`` drops
    every connection and refuses new ones until ``restore()``."""

    def __init__(self, target_port: int):
        self.target = ("127.0.0.1", target_port)
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self._cut = threading.Event()
        self._stop = threading.Event()
        self._socks: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                a, _ = self.server.accept()
            except (socket.timeout, TimeoutError):
                continue
            except OSError:
                return
            if self._cut.is_set():
                a.close()
                continue
            try:
                b = socket.create_connection(self.target, timeout=3)
            except OSError:
                a.close()
                continue
            with self._lock:
                self._socks += [a, b]
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or self._cut.is_set():
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            socks, self._socks = self._socks, []
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def restore(self) -> None:
        self._cut.clear()

    def close(self) -> None:
        self._stop.set()
        self.cut()
        self.server.close()


def kill_broker(p) -> None:
    """kill -9 a whole broker, supervisor and workers (a host that dies), and reap it."""
    import os
    import signal
    pids = p.worker_pids()
    os.kill(p.pid, signal.SIGKILL)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.popen.wait()
