"""Fixtures of the oracle tests: Apache RocketMQ 4.9.7 and shmq side by side.

* ``apache`` — the run's shared Apache RocketMQ NameServer + broker (tests/thirdparty/
  rocketmq_server.py; one pair for all pytest-xdist workers). Skips, with the reason, only when
  java/javac/mvn are missing or the registry refuses the server jars.
* ``shmq_target`` — this worker's shmq NameServer + broker, configured like the Apache one.
* ``target`` — parametrized over both: the same test body runs against each.

A :class:`Target` names a pair by its addresses; tests use fresh topic and group names
(:func:`unique`) so that the long-lived pairs can be shared.
"""
from __future__ import annotations

import itertools
import os
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import CreateTopicRequestHeader
from tests.integration.broker_helpers import BROKER_READY, TEST_SETTINGS
from tests.integration.conftest import NAMESRV_READY, start_process
from tests.thirdparty import rocketmq_server as rmq

#: the broker.conf keys both brokers of a pair get (besides their own test defaults)
COMMON = {
    "brokerClusterName": rmq.BROKER_DEFAULTS["brokerClusterName"],
    "enablePropertyFilter": "true",
    "messageDelayLevel": rmq.BROKER_DEFAULTS["messageDelayLevel"],
    "transactionTimeOut": rmq.BROKER_DEFAULTS["transactionTimeOut"],
    "transactionCheckInterval": rmq.BROKER_DEFAULTS["transactionCheckInterval"],
}


@dataclass
class Target:
    name: str
    namesrv: str
    broker: str
    broker_name: str
    cluster: str

    def client(self, which: str = "broker", timeout: float = 5.0) -> SyncRemotingClient:
        return SyncRemotingClient(self.namesrv if which == "namesrv" else self.broker, timeout=timeout)

    def create_topic(self, topic: str, queues: int = 4, perm: int = 6, filter_type: str = "SINGLE_TAG",
                     order: bool = False) -> None:
        """UPDATE_AND_CREATE_TOPIC on the broker, then wait for the NameServer's route."""
        h = CreateTopicRequestHeader(topic=topic, defaultTopic="TBW102", readQueueNums=queues,
                                     writeQueueNums=queues, perm=perm, topicFilterType=filter_type,
                                     order=order)
        with self.client() as c:
            r = c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h))
        assert r.code == 0, (self.name, r.code, r.remark)
        self.wait_route(topic)

    def wait_route(self, topic: str, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        with self.client("namesrv") as c:
            while time.monotonic() < deadline:
                if c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)).code == 0:
                    return
                time.sleep(0.1)
        raise AssertionError(f"{self.name}: no route for {topic}")


_seq = itertools.count()


def unique(prefix: str) -> str:
    """A topic/group name no other test (or worker, or run) uses."""
    return f"{prefix}_{uuid.uuid4().hex[:8]}_{next(_seq)}"


@pytest.fixture(scope="session")
def apache(tmp_path_factory) -> Target:
    rmq.require_server_classpath()
    with rmq.SharedOracle() as o:
        yield Target("apache", o.namesrv, o.broker, o.broker_name, o.cluster)


@pytest.fixture(scope="session")
def shmq_target(tmp_path_factory) -> Target:
    base = tmp_path_factory.mktemp("shmq-peer")
    ns = start_process([sys.executable, "-m", "shmq.cli.namesrv", "--port", "0"], NAMESRV_READY,
                       base / "namesrv.log")
    ns_addr = f"127.0.0.1:{ns.match.group(1)}"
    name = f"shmq-{os.getpid()}"
    argv = [sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(base / "store"),
            "--workers", "2", "--namesrv", ns_addr]
    for k, v in {**TEST_SETTINGS, **COMMON, "brokerName": name}.items():
        argv += ["--set", f"{k}={v}"]
    try:
        br = start_process(argv, BROKER_READY, base / "broker.log", timeout=30)
    except BaseException:
        ns.stop()
        raise
    try:
        addr = f"127.0.0.1:{br.match.group(1)}"
        rmq.wait_registered(ns_addr, name, addr, timeout=30)
        yield Target("shmq", ns_addr, addr, name, COMMON["brokerClusterName"])
    finally:
        br.stop()
        ns.stop()


@pytest.fixture(params=["shmq", "apache"])
def target(request) -> Target:
    return request.getfixturevalue("shmq_target" if request.param == "shmq" else "apache")


@pytest.fixture
def both(shmq_target, apache) -> tuple[Target, Target]:
    return shmq_target, apache


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.oracle)
