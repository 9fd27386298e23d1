"""A third-party RocketMQ 4.x client (ali-ons, from npm) through shmq-namesrv + shmq-broker
(2 workers): 10,000 messages with tags and keys, two push consumers of one group split the
queues and together receive every message; and the same across a broker restart."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import pytest

from shmq.protocol import RequestCode, SyncRemotingClient, request

from .broker_helpers import create_topic, start_broker  # noqa: F401
from .conftest import node_harness_or_skip, processes, start_namesrv  # noqa: F401

N = 10_000


class Ons:
    """One ali-ons harness process whose JSON lines are collected by a thread."""

    def __init__(self, *args: str, log_path):
        argv = node_harness_or_skip() + list(args)
        self.log = open(log_path, "wb")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=self.log, stdin=subprocess.DEVNULL,
                                  start_new_session=True)
        self.events: list[dict] = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self) -> None:
        for line in self.p.stdout:
            if line.startswith(b"{"):
                self.events.append(json.loads(line))

    def messages(self) -> list[dict]:
        return [e for e in list(self.events) if e["event"] == "message"]

    def wait(self, timeout: float) -> int:
        rc = self.p.wait(timeout)
        # the process has exited, so its pipe ends: wait for the reader to parse all it wrote
        # (5 s was not always enough for 10,000 lines on a loaded CI machine: 9,769 of 10,000)
        self.t.join(timeout)
        assert not self.t.is_alive(), "the harness's output was not read to its end"
        return rc

    def stop(self) -> None:
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait(10)
        self.t.join(5)
        self.p.stdout.close()
        self.log.close()


@pytest.fixture
def ons_procs():
    started: list[Ons] = []
    yield started
    for o in started:
        o.stop()


def wait_route(ns_addr: str, topic: str, timeout: float = 10.0) -> None:
    with SyncRemotingClient(ns_addr) as n:
        deadline = time.monotonic() + timeout
        while n.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)).code != 0:
            assert time.monotonic() < deadline, "topic never reached the NameServer"
            time.sleep(0.05)


def wait_members(broker_addr: str, group: str, n: int, timeout: float = 20.0) -> None:
    with SyncRemotingClient(broker_addr) as c:
        deadline = time.monotonic() + timeout
        while True:
            r = c.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=group))
            if r.code == 0 and len(json.loads(r.body)["consumerIdList"]) == n:
                return
            assert time.monotonic() < deadline, f"group {group} never had {n} members"
            time.sleep(0.1)


def produce(ns, topic: str, count: int, body: str, tmp_path, ons_procs, timeout: float = 120.0) -> list[dict]:
    p = Ons("produce", "--namesrv", ns.addr, "--topic", topic, "--group", "pg", "--count", str(count),
            "--tags", "TagA", "--keys", body, "--body", body, log_path=tmp_path / f"produce-{body}.log")
    ons_procs.append(p)
    assert p.wait(timeout) == 0, (tmp_path / f"produce-{body}.log").read_text()
    sent = [e for e in p.events if e["event"] == "sent"]
    assert len(sent) == count and all(e["status"] == "SEND_OK" for e in sent)
    return sent


def start_consumers(ns, topic: str, group: str, tmp_path, ons_procs, n: int = 2) -> list[Ons]:
    cs = [Ons("consume", "--namesrv", ns.addr, "--topic", topic, "--group", group, "--count", str(10 * N),
              "--timeout", "600000", log_path=tmp_path / f"consume-{group}-{i}.log") for i in range(n)]
    ons_procs.extend(cs)
    return cs


def wait_all(consumers: list[Ons], expected: set[str], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        got = {m["body"] for c in consumers for m in c.messages()}
        if expected <= got:
            return
        assert time.monotonic() < deadline, f"missing {len(expected - got)} of {len(expected)} messages"
        time.sleep(0.2)


def check_messages(consumers: list[Ons], prefixes_counts: dict[str, int]) -> None:
    seen: dict[str, dict] = {}
    for c in consumers:
        for m in c.messages():
            seen[m["body"]] = m
    for prefix, count in prefixes_counts.items():
        for i in range(count):
            m = seen[f"{prefix}-{i}"]
            assert m["tags"] == "TagA" and m["keys"] in (f"{prefix}-{i}", [f"{prefix}-{i}"]) and m["topic"] == "OnsTopic"


def test_ali_ons_10000_messages_two_consumers_split_queues(start_namesrv, start_broker, tmp_path, ons_procs):
    ns = start_namesrv()
    br = start_broker(namesrv=ns)
    with SyncRemotingClient(br.addr) as c:
        assert create_topic(c, "OnsTopic", queues=4).code == 0
    wait_route(ns.addr, "OnsTopic")
    consumers = start_consumers(ns, "OnsTopic", "ons_cg", tmp_path, ons_procs)
    wait_members(br.addr, "ons_cg", 2)
    time.sleep(2.5)  # two rebalance rounds (ali-ons rebalances every second in the harness)
    produce(ns, "OnsTopic", N, "m", tmp_path, ons_procs)
    wait_all(consumers, {f"m-{i}" for i in range(N)})
    check_messages(consumers, {"m": N})
    queues = [{m["queueId"] for m in c.messages()} for c in consumers]
    assert queues[0] and queues[1], "both consumers got a share"
    assert not queues[0] & queues[1] and queues[0] | queues[1] == {0, 1, 2, 3}, queues


def test_ali_ons_across_a_broker_restart(start_namesrv, start_broker, tmp_path, ons_procs):
    ns = start_namesrv()
    br = start_broker(namesrv=ns)
    with SyncRemotingClient(br.addr) as c:
        assert create_topic(c, "OnsTopic", queues=4).code == 0
    wait_route(ns.addr, "OnsTopic")
    consumers = start_consumers(ns, "OnsTopic", "ons_cg2", tmp_path, ons_procs)
    wait_members(br.addr, "ons_cg2", 2)
    half = N // 2
    produce(ns, "OnsTopic", half, "a", tmp_path, ons_procs)
    # restart in the middle: same store, same port; consumers reconnect by themselves
    assert br.stop(timeout=20) == 0
    br2 = start_broker(namesrv=ns, store=br.store, port=br.port)
    wait_route(ns.addr, "OnsTopic")
    produce(ns, "OnsTopic", half, "b", tmp_path, ons_procs)
    wait_all(consumers, {f"a-{i}" for i in range(half)} | {f"b-{i}" for i in range(half)}, timeout=180)
    check_messages(consumers, {"a": half, "b": half})
    assert all(c.messages() for c in consumers)
    assert br2.alive()
