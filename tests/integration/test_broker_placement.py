"""The broker places client connections on its workers (broker/shared/placement.py): a worker
that accepts a connection while a sibling serves fewer hands the socket over, so both workers
serve, whatever the kernel's SO_REUSEPORT hash chose. A worker killed with SIGKILL while
sockets are being handed to it leaves no client hanging: each is answered or sees its
connection close, and the broker goes on accepting."""
from __future__ import annotations

import collections
import os
import signal
import time

import psutil

from shmq.broker.shared import placement
from shmq.errors import RemotingClosed, RemotingConnectError
from shmq.protocol import RequestCode, SyncRemotingClient, request

from .broker_helpers import create_topic, send, start_broker, worker_id  # noqa: F401
from .conftest import processes  # noqa: F401


def test_connections_spread_evenly_over_both_workers(start_broker):
    br = start_broker(workers=2)
    clients: list[SyncRemotingClient] = []
    try:
        served = collections.Counter()
        for _ in range(8):  # one at a time: each is served (so counted) before the next connects
            clients.append(SyncRemotingClient(br.addr, timeout=10))
            served[worker_id(clients[-1])] += 1
        assert served == {1: 4, 2: 4}, served
    finally:
        for c in clients:
            c.close()


def test_a_new_client_goes_to_the_idle_worker_beside_a_busy_one(start_broker):
    """A producer's worker moves messages; an idle connection keeps the other as many
    connections (a client's second, idle connection): each new client goes to the idle one."""
    br = start_broker(workers=2)
    sender = SyncRemotingClient(br.addr, timeout=10)
    idle = SyncRemotingClient(br.addr, timeout=10)
    try:
        assert create_topic(sender, "Busy", queues=1).code == 0
        busy_wid = worker_id(sender)
        assert worker_id(idle) != busy_wid  # (spread while both were idle)
        for round_ in range(4):
            for i in range(2 * placement.BUSY):
                assert send(sender, "Busy", f"m{round_}-{i}".encode(), queue_id=0).code == 0
            time.sleep(2 * placement.MOVED_PERIOD_S)  # (the busy worker says so)
            with SyncRemotingClient(br.addr, timeout=10) as c:
                assert worker_id(c) != busy_wid, f"round {round_}: the new client is on the busy worker"
    finally:
        sender.close()
        idle.close()


def test_one_worker_serves_every_connection_when_there_is_one(start_broker):
    br = start_broker(workers=1)
    clients = [SyncRemotingClient(br.addr, timeout=10) for _ in range(4)]
    try:
        assert {worker_id(c) for c in clients} == {1}
    finally:
        for c in clients:
            c.close()


def _serving_pid(br, c: SyncRemotingClient) -> int:
    port = c.sock.getsockname()[1]
    for pid in br.worker_pids():
        if any(k.raddr and k.raddr.port == port for k in psutil.Process(pid).net_connections("tcp")):
            return pid
    raise AssertionError("no worker serves the connection")


def test_worker_killed_while_sockets_are_handed_to_it(start_broker):
    br = start_broker(workers=2)
    first = SyncRemotingClient(br.addr, timeout=10)
    worker_id(first)
    other = next(p for p in br.worker_pids() if p != _serving_pid(br, first))
    os.kill(other, signal.SIGSTOP)  # it takes nothing from its inbox now: what is sent there waits
    waiting: list[SyncRemotingClient] = []
    try:
        for i in range(6):  # each asks once, not waiting: some are in the stopped worker's hands
            c = SyncRemotingClient(br.addr, timeout=10)
            c.send(request(RequestCode.GET_BROKER_RUNTIME_INFO))
            waiting.append(c)
        os.kill(other, signal.SIGKILL)
        outcomes = collections.Counter()
        for c in waiting:
            try:
                outcomes["answered" if c.receive(10).code == 0 else "refused"] += 1
            except RemotingClosed:
                outcomes["closed"] += 1  # the client reconnects; a timeout here would be a hang
        assert sum(outcomes.values()) == 6 and not outcomes["refused"], outcomes
        assert outcomes["closed"] >= 1, outcomes  # some had been handed to the killed worker
        # the broker still accepts, and a new connection is served (by the survivor or the restarted one)
        deadline = time.monotonic() + 20
        while True:
            try:
                with SyncRemotingClient(br.addr, timeout=10) as c:
                    assert worker_id(c) in (1, 2)
                break
            except (RemotingClosed, RemotingConnectError):
                assert time.monotonic() < deadline, "the broker stopped accepting"
                time.sleep(0.1)
        assert worker_id(first) in (1, 2)  # the survivor's own connection never noticed
    finally:
        for c in [first, *waiting]:
            c.close()
        try:
            os.kill(other, signal.SIGCONT)
        except ProcessLookupError:
            pass
