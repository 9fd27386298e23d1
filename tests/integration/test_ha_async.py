"""ASYNC_MASTER + SLAVE as real processes: the slave follows the master's log byte for byte,
serves pulls, refuses sends, copies the master's topics and offsets, is in the route with
its brokerId, resumes after a kill -9 from its own files; a master killed -9 loses at most
what the slave had not received (the test reports how much)."""
from __future__ import annotations

import os

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import decode_topic_route
from shmq.protocol.headers import UpdateConsumerOffsetRequestHeader

from .broker_helpers import create_topic, send
from .broker_helpers import start_broker  # noqa: F401 (fixture)
from .ha_helpers import kill_broker, commit_pos, pull_all, start_pair, wait_slave_knows, wait_until  # noqa: F401 (fixture)


def _route(namesrv, topic):
    with SyncRemotingClient(namesrv.addr, timeout=5) as c:
        r = c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic))
    return decode_topic_route(r.body) if r.code == 0 else None


def _same_log(master_store, slave_store, end):
    """The slave's CommitLog files hold the master's bytes below ``end``."""
    mdir, sdir = os.path.join(master_store, "commitlog"), os.path.join(slave_store, "commitlog")
    for name in sorted(os.listdir(sdir)):
        start = int(name)
        if start >= end:
            continue
        n = min(end - start, os.path.getsize(os.path.join(sdir, name)))
        with open(os.path.join(mdir, name), "rb") as a, open(os.path.join(sdir, name), "rb") as b:
            assert a.read(n) == b.read(n), f"file {name} differs"


def test_async_pair_replicates_serves_reads_and_refuses_writes(start_pair, namesrv):
    master, slave = start_pair("ASYNC_MASTER")
    with SyncRemotingClient(master.addr, timeout=5) as c:
        assert create_topic(c, "HA", 2).code == 0
        for i in range(300):
            assert send(c, "HA", b"m%04d" % i, queue_id=i % 2).code == 0
        c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, UpdateConsumerOffsetRequestHeader(
            consumerGroup="cg1", topic="HA", queueId=0, commitOffset=42)))
    end = commit_pos(master.addr)
    wait_until(lambda: commit_pos(slave.addr) == end, what="the slave to catch up")
    _same_log(master.store, slave.store, end)
    wait_slave_knows(slave.addr, "HA")
    assert sorted(pull_all(slave.addr, "HA", 2)) == [b"m%04d" % i for i in range(300)]
    # the slave refuses writes as RocketMQ's does (SERVICE_NOT_AVAILABLE), storing nothing
    with SyncRemotingClient(slave.addr, timeout=5) as c:
        r = send(c, "HA", b"nope")
        assert r.code == 14 and "slave" in r.remark
    assert commit_pos(slave.addr) == end
    # both are in the route, under one brokerName, ids 0 and 1
    route = wait_until(lambda: _route(namesrv, "HA"), what="route")
    addrs = {bd.brokerName: bd.brokerAddrs for bd in route.brokerDatas}
    assert len(addrs) == 1 and set(next(iter(addrs.values()))) == {0, 1}

    # topics and offsets reach the slave through its periodic sync
    def synced():
        with SyncRemotingClient(slave.addr, timeout=5) as c:
            r = c.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="cg1", topic="HA", queueId=0))
            t = c.invoke(request(RequestCode.GET_ALL_TOPIC_CONFIG))
        return r.code == 0 and r.ext_fields.get("offset") == "42" and b'"HA"' in t.body
    wait_until(synced, what="offsets and topics on the slave")


def test_slave_killed_resumes_from_its_own_files(start_pair, start_broker, namesrv):
    master, slave = start_pair("ASYNC_MASTER", name="pair-r")
    with SyncRemotingClient(master.addr, timeout=5) as c:
        for i in range(200):
            assert send(c, "HR", b"a%04d" % i, queue_id=0).code == 0
        wait_until(lambda: commit_pos(slave.addr) == commit_pos(master.addr))
        kill_broker(slave)
        for i in range(200):
            assert send(c, "HR", b"b%04d" % i, queue_id=0).code == 0
    slave = start_broker(namesrv, settings={"brokerName": "pair-r", "brokerRole": "SLAVE", "brokerId": 1,
                                            "haSendHeartbeatInterval": 500, "registerNameServerPeriod": 1000},
                         store=slave.store)
    end = commit_pos(master.addr)
    wait_until(lambda: commit_pos(slave.addr) == end, what="the restarted slave to catch up")
    # (the topic reaches the restarted slave with its first sync from the master)
    got = wait_until(lambda: pull_all(slave.addr, "HR", 1), what="the topic on the slave")
    assert got == [b"a%04d" % i for i in range(200)] + [b"b%04d" % i for i in range(200)]
    _same_log(master.store, slave.store, end)


def test_async_master_killed_loses_at_most_what_the_slave_lacked(start_pair, capsys):
    master, slave = start_pair("ASYNC_MASTER", name="pair-k")
    acked = []
    with SyncRemotingClient(master.addr, timeout=5) as c:
        assert create_topic(c, "HK", 4).code == 0
        wait_slave_knows(slave.addr, "HK")  # else an early kill leaves the slave nothing to serve
        for i in range(2000):
            if send(c, "HK", b"k%05d" % i, queue_id=i % 4).code == 0:
                acked.append(b"k%05d" % i)
            if i == 1500:
                kill_broker(master)  # while the stream is in flight
                break
    master.popen.wait()
    on_slave = set(pull_all(slave.addr, "HK", 4))
    lost = [b for b in acked if b not in on_slave]
    # what the slave has is a prefix of what the master acknowledged (nothing out of order)
    assert on_slave <= set(acked)
    assert lost == acked[len(acked) - len(lost):]
    with capsys.disabled():
        print(f"\nASYNC_MASTER kill -9: {len(acked)} acknowledged, {len(lost)} not yet on the slave")
