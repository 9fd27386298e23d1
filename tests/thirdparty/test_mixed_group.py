"""One consumer group of shmq Python PushConsumers and Apache RocketMQ Java push consumers
(rocketmq-client 4.9.8, ``Harness member``): the members split the topic's queues exactly as
RocketMQ's AllocateMessageQueueAveragely does, every queue is consumed by one member only,
every message is received once, and the split is redone when a member joins or leaves.

The expected split is computed here from the group's sorted client ids (RocketMQ's
algorithm, written out below), not by shmq's own allocation code, and the Java members'
allocations come from the Java client itself: a shmq consumer that took every queue (or
any queue not its own) fails the test.
"""
from __future__ import annotations

import json
import subprocess
import threading
import time

import pytest

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import ConsumerListBody, decode_json
from tests.integration.broker_helpers import create_topic, start_broker  # noqa: F401
from tests.integration.client_helpers import Collector, consumer
from tests.integration.conftest import namesrv, processes, start_namesrv  # noqa: F401
from shmq import Message, Producer

from . import jvm
from .harnesses import harness_cp, java_member_argv

TOPIC, GROUP, QUEUES = "MixT", "mixg", 8


def averagely(n_queues: int, cids: list[str], me: str) -> list[int]:
    """AllocateMessageQueueAveragely.allocate over queue ids 0..n-1 (sorted) and sorted cids."""
    index, c = cids.index(me), len(cids)
    mod = n_queues % c
    size = 1 if n_queues <= c else (n_queues // c + 1 if mod > 0 and index < mod else n_queues // c)
    start = index * size if mod > 0 and index < mod else index * size + mod
    return list(range(start, start + min(size, n_queues - start)))


class JavaMember:
    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.alloc: list[int] = []
        self.client_id: str | None = None
        self.received: list[tuple[str, int]] = []
        self._t = threading.Thread(target=self._read, daemon=True)
        self._t.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            ev = json.loads(line)
            if "alloc" in ev:
                self.alloc, self.client_id = sorted(ev["alloc"]), ev["clientId"]
            elif "recv" in ev:
                self.received.append((ev["recv"], ev["queue"]))

    def queues(self) -> list[int]:
        return self.alloc

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self._t.join(5)
        self.proc.stdout.close()


class PyMember:
    def __init__(self, ns: str, local: str):
        self.col = Collector()
        self.c = consumer(ns, GROUP, TOPIC, self.col, local=local)
        self.client_id = self.c.instance.client_id

    def queues(self) -> list[int]:
        return sorted(mq.queue_id for mq in list(self.c.pqs) if mq.topic == TOPIC)

    @property
    def received(self) -> list[tuple[str, int]]:
        return [(m.body.decode(), m.queue_id) for m in list(self.col.msgs)]

    def stop(self) -> None:
        self.c.shutdown()


def _group_ids(addr: str) -> list[str]:
    with SyncRemotingClient(addr, timeout=5) as c:
        r = c.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup=GROUP))
        return sorted(decode_json(r.body, ConsumerListBody).consumerIdList) if r.code == 0 else []


def _settled(broker_addr: str, members: list, timeout: float = 40.0) -> None:
    """Wait until the broker lists exactly these members and each holds exactly its share."""
    deadline = time.monotonic() + timeout
    while True:
        ids = sorted(m.client_id for m in members if m.client_id)
        got = {m.client_id: m.queues() for m in members}
        ok = (len(ids) == len(members) and _group_ids(broker_addr) == ids
              and all(got[cid] == averagely(QUEUES, ids, cid) for cid in ids))
        if ok:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"allocation {got} is not AllocateMessageQueueAveragely's over {ids}")
        time.sleep(0.2)


def _send_and_check(ns: str, members: list, tag: str, n: int = 40) -> None:
    before = {id(m): len(m.received) for m in members}
    with Producer("mixp", ns, local="never") as p:
        for i in range(n):
            p.send(Message(TOPIC, f"{tag}-{i}".encode()))
    deadline = time.monotonic() + 30
    while sum(len(m.received) - before[id(m)] for m in members) < n and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)  # a duplicate would arrive now
    bodies = []
    for m in members:
        new = m.received[before[id(m)]:]
        own = set(m.queues())
        assert {q for _, q in new} <= own, f"{m.client_id} consumed queues {({q for _, q in new})} outside {own}"
        bodies += [b for b, _ in new]
    per = {m.client_id: sorted(m.received[before[id(m)]:]) for m in members}
    assert sorted(bodies) == sorted(f"{tag}-{i}" for i in range(n)), f"not exactly once: {per}"


def test_python_and_java_consumers_split_queues_averagely(namesrv, start_broker, tmp_path):
    jvm.require_java()
    try:
        harness_cp()
    except jvm.Unavailable as e:
        pytest.skip(f"rocketmq-client 4.9.8 unavailable: {e}")
    br = start_broker(namesrv=namesrv, workers=2)
    with SyncRemotingClient(br.addr, timeout=5) as c:
        assert create_topic(c, TOPIC, queues=QUEUES).code == 0
    logs = tmp_path / "java-logs"
    members: list = []
    try:
        members.append(JavaMember(java_member_argv(namesrv.addr, TOPIC, GROUP, "mix-j1", logs)))
        members.append(PyMember(namesrv.addr, "never"))
        _settled(br.addr, members)
        _send_and_check(namesrv.addr, members, "two")

        # a Java and a shmq member join: four members, 2 queues each
        members.append(JavaMember(java_member_argv(namesrv.addr, TOPIC, GROUP, "mix-j2", logs)))
        members.append(PyMember(namesrv.addr, "always"))
        _settled(br.addr, members)
        _send_and_check(namesrv.addr, members, "four")

        # a shmq member and a Java member leave: the other two split 8 again
        for gone in (members.pop(1), members.pop(0)):
            gone.stop()
        _settled(br.addr, members)
        _send_and_check(namesrv.addr, members, "back-to-two")
    finally:
        for m in members:
            m.stop()
