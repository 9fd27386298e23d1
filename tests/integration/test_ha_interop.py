"""Replication between shmq and Apache RocketMQ 4.9.7 (the broker jars from Maven Central,
tests/thirdparty/rocketmq_server.py) over the 4.x HA protocol, both ways: an Apache slave
follows a shmq master, and a shmq slave follows an Apache master. Each slave finds its master
through the NameServer's answer to its registration; the CommitLog bytes must be the
master's, byte for byte, and the slave serves the messages."""
from __future__ import annotations

import os

import pytest

from shmq.protocol import SyncRemotingClient

from .broker_helpers import create_topic, send, start_broker  # noqa: F401  (fixture)
from .ha_helpers import commit_pos, pull_all, wait_until

rocketmq_server = pytest.importorskip("tests.thirdparty.rocketmq_server")

FILE_SIZE = 4 * 1024 * 1024  # both sides: the slave's files must be the master's size


@pytest.fixture(scope="module")
def apache_home(tmp_path_factory):
    rocketmq_server.require_server_classpath()
    return rocketmq_server.RocketMQHome(tmp_path_factory.mktemp("rmq-home"))


def _same_log(master_dir: str, slave_dir: str, end: int) -> None:
    """Every byte below ``end`` in the slave's CommitLog files equals the master's."""
    checked = 0
    for name in sorted(os.listdir(slave_dir)):
        start = int(name)
        if start >= end:
            continue
        n = min(end - start, FILE_SIZE)
        with open(os.path.join(master_dir, name), "rb") as a, open(os.path.join(slave_dir, name), "rb") as b:
            assert a.read(n) == b.read(n), f"CommitLog file {name} differs"
        checked += n
    assert checked == end, (checked, end)


def _fill(addr: str, topic: str, n: int) -> list[bytes]:
    bodies = [b"interop-%04d-" % i + os.urandom(8).hex().encode() * (1 + i % 50) for i in range(n)]
    with SyncRemotingClient(addr, timeout=10) as c:
        assert create_topic(c, topic, 2).code == 0
        for i, b in enumerate(bodies):
            assert send(c, topic, b, queue_id=i % 2, keys=f"k{i}").code == 0
    return bodies


def _pulled_all(addr: str, topic: str, n: int) -> list[bytes] | None:
    """Every body of ``topic`` once the broker serves at least ``n`` of them, else None."""
    got = pull_all(addr, topic, 2)
    return got if len(got) >= n else None


def test_apache_slave_follows_a_shmq_master(start_broker, namesrv, apache_home, tmp_path):
    master = start_broker(namesrv, settings={"brokerName": "mixed-a", "brokerClusterName": "OracleCluster",
                                             "mappedFileSizeCommitLog": FILE_SIZE,
                                             "haSendHeartbeatInterval": 1000})
    store = tmp_path / "apache-slave"
    slave = rocketmq_server.start_broker(apache_home, namesrv.addr, store, brokerName="mixed-a", brokerId=1,
                                         brokerRole="SLAVE", brokerIP2="127.0.0.1")
    try:
        bodies = _fill(master.addr, "InteropA", 300)
        end = wait_until(lambda: max(commit_pos(master.addr), 0), timeout=30, what="the shmq master's log end")
        wait_until(lambda: commit_pos(slave.addr) == end, timeout=60, what="the Apache slave to catch up")
        _same_log(os.path.join(master.store, "commitlog"), str(store / "commitlog"), end)
        # the slave's ConsumeQueues are built from the replicated log after it lands, so the
        # first pulls may see a prefix: wait for all of it, then compare
        got = wait_until(lambda: _pulled_all(slave.addr, "InteropA", len(bodies)), timeout=60,
                         what="the topic on the Apache slave (SlaveSynchronize)")
        assert sorted(got) == sorted(bodies)
    finally:
        slave.stop()


def test_shmq_slave_follows_an_apache_master(start_broker, namesrv, apache_home, tmp_path):
    store = tmp_path / "apache-master"
    master = rocketmq_server.start_broker(apache_home, namesrv.addr, store, brokerName="mixed-b",
                                          brokerRole="ASYNC_MASTER", brokerIP2="127.0.0.1")
    try:
        slave = start_broker(namesrv, settings={"brokerName": "mixed-b", "brokerClusterName": "OracleCluster",
                                                "brokerRole": "SLAVE", "brokerId": 1,
                                                "mappedFileSizeCommitLog": FILE_SIZE,
                                                "slaveSynchronizeInterval": 1000})
        bodies = _fill(master.addr, "InteropB", 300)
        end = wait_until(lambda: max(commit_pos(master.addr), 0), timeout=30, what="the Apache master's log end")
        wait_until(lambda: commit_pos(slave.addr) == end, timeout=60,
                   what=f"the shmq slave to catch up to {end} (at {commit_pos(slave.addr)})")
        _same_log(str(store / "commitlog"), os.path.join(slave.store, "commitlog"), end)
        got = wait_until(lambda: _pulled_all(slave.addr, "InteropB", len(bodies)), timeout=60,
                         what="the topic on the shmq slave")
        assert sorted(got) == sorted(bodies)
    finally:
        master.stop()
