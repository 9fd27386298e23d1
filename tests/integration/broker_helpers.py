"""Broker fixtures and wire helpers for tests/integration/test_broker_*.py.

``start_broker(namesrv=..., workers=2, settings={...})`` starts ``shmq-broker`` on port 0 with
a temp store and short intervals, waits for its readiness line and returns a
:class:`BrokerProc` (``.addr``, ``.port``, ``.vip_port``, ``.store``, ``.worker_pids()``).
Started brokers are stopped by pid at teardown (the ``processes`` fixture of conftest.py).
"""
from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.wire import create_topic, pull, send  # noqa: F401 (the tests import them from here)

from .conftest import Proc, start_process

BROKER_READY = r"shmq-broker listening on 127\.0\.0\.1:(\d+) \(vip (\d+), (\d+) workers, store (\S+), pid (\d+)\)"

#: Short intervals: tests must not wait for RocketMQ's 10 s scans.
TEST_SETTINGS = {
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "flushIntervalCommitLog": 50,
    "registerNameServerPeriod": 2000,
    "flushConsumerOffsetInterval": 500,
    "clientScanInterval": 500,
    "maxHashSlotNum": 4096,
    "maxIndexNum": 65536,
    "shutdownGraceMillis": 1000,
    # This VM reports 76% of its disk used (statvfs counts blocks reserved for others), over
    # RocketMQ's default 75%: the store would expire CommitLog files under the tests' feet.
    "diskMaxUsedSpaceRatio": 95,
    # A broker's start-up segment gc would race the segment tests of other xdist workers
    # (tests/crash/test_segment_gc.py tests it, with its own broker).
    "segmentGcOnStart": "false",
}


class BrokerProc(Proc):
    @property
    def port(self) -> int:
        return int(self.match.group(1))

    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def vip_port(self) -> int:
        return int(self.match.group(2))

    @property
    def store(self) -> str:
        return self.match.group(4)

    def worker_pids(self) -> list[int]:
        try:
            return sorted(c.pid for c in psutil.Process(self.pid).children() if c.is_running())
        except psutil.NoSuchProcess:
            return []


@pytest.fixture
def start_broker(processes, tmp_path: Path):
    counter = iter(range(1000))
    stores: list[Path] = []
    names: dict[str, str] = {}  # store -> broker name: a restart on the same store is the same broker

    def start(namesrv=None, workers: int = 2, settings: dict | None = None, store: Path | None = None,
              port: int = 0) -> BrokerProc:
        n = next(counter)
        store = store or tmp_path / f"store-{n}"
        name = names.setdefault(str(store), f"broker-{n}")
        argv = [sys.executable, "-m", "shmq.cli.broker", "--port", str(port), "--store", str(store),
                "--workers", str(workers)]
        if namesrv is not None:
            argv += ["--namesrv", namesrv.addr]
        for k, v in {**TEST_SETTINGS, "brokerName": name, **(settings or {})}.items():
            argv += ["--set", f"{k}={v}"]
        env = dict(os.environ, SHMQ_LOG_LEVEL=os.environ.get("SHMQ_LOG_LEVEL", "INFO"))
        p = start_process(argv, BROKER_READY, tmp_path / f"broker-{n}-{int(time.time() * 1000)}.log", env=env)
        p.__class__ = BrokerProc
        processes.append(p)
        stores.append(store)
        return p  # type: ignore[return-value]

    yield start
    # a broker killed with SIGKILL leaves its shared-memory segment: remove it (the
    # ``processes`` fixture has stopped every broker by now)
    import posix_ipc
    from shmq.store.control import segment_name
    for st in stores:
        try:
            posix_ipc.unlink_shared_memory(segment_name(str(st)))
        except posix_ipc.ExistentialError:
            pass


# ---- wire helpers (create_topic, send, pull live in shmq/protocol/wire.py) ----------------------


def worker_id(c: SyncRemotingClient) -> int:
    """Which worker serves this connection (GET_BROKER_RUNTIME_INFO carries it)."""
    from shmq.protocol.bodies import KVTable, decode_json
    return int(decode_json(c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).body, KVTable).table["shmqWorkerId"])


def clients_on_two_workers(addr: str, tries: int = 64) -> tuple[SyncRemotingClient, SyncRemotingClient]:
    """Two connections the kernel gave to different workers (SO_REUSEPORT hashes each
    connection; a few attempts find a pair). The caller closes both."""
    first = SyncRemotingClient(addr, timeout=5)
    w0 = worker_id(first)
    for _ in range(tries):
        c = SyncRemotingClient(addr, timeout=5)
        if worker_id(c) != w0:
            return first, c
        c.close()
    first.close()
    raise AssertionError("every connection went to the same worker")
