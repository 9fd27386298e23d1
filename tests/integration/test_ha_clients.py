"""shmq's own clients against master/slave pairs and several masters (real processes):
a consumer keeps consuming from the slave while the master is down and returns to the
master after; pulls carry suggestWhichBrokerId as RocketMQ computes it; producers spread
over every master and move off one that was killed."""
from __future__ import annotations


from shmq import Message, Producer
from shmq.protocol import SyncRemotingClient

from .broker_helpers import pull, send, start_broker  # noqa: F401 (fixture)
from .client_helpers import Collector, consumer, make_topic, wait_route
from .ha_helpers import kill_broker, HA_SETTINGS, commit_pos, start_pair, wait_until  # noqa: F401 (fixture)


def _kill(p):
    kill_broker(p)


def test_consumer_reads_from_the_slave_while_the_master_is_down(start_pair, start_broker, namesrv):
    master, slave = start_pair("ASYNC_MASTER", name="pair-c")
    make_topic(master, "HCons", 2)
    wait_route(namesrv.addr, "HCons")
    with Producer("hpg", namesrv.addr, local="never") as p:
        for i in range(100):
            assert p.send(Message("HCons", b"a%03d" % i)).status.value == "SEND_OK"
    wait_until(lambda: commit_pos(slave.addr) == commit_pos(master.addr), what="the slave to catch up")
    wait_until(lambda: b'"HCons"' in _topics(slave.addr), what="the topic on the slave")
    _kill(master)
    got = Collector()
    c = consumer(namesrv.addr, "hcg", "HCons", got)
    try:
        assert got.wait_for(lambda g: len(g.bodies()) >= 100, 60), len(got.bodies())
        # the master comes back (same port): new messages reach the consumer; then the slave
        # goes: they still do, so the consumer is back on the master
        master2 = start_broker(namesrv, settings={**HA_SETTINGS, "brokerName": "pair-c"},
                               store=master.store, port=master.port)
        with Producer("hpg2", namesrv.addr, local="never") as p:
            for i in range(20):
                assert p.send(Message("HCons", b"b%03d" % i)).status.value == "SEND_OK"
            assert got.wait_for(lambda g: len(g.bodies()) >= 120, 60)
            _kill(slave)
            for i in range(20):
                assert p.send(Message("HCons", b"c%03d" % i)).status.value == "SEND_OK"
        assert got.wait_for(lambda g: len(g.bodies()) >= 140, 60), len(got.bodies())
        assert got.bodies() == ({b"a%03d" % i for i in range(100)} | {b"b%03d" % i for i in range(20)}
                                | {b"c%03d" % i for i in range(20)})
        assert master2.alive()
    finally:
        c.shutdown()


def _topics(addr):
    from shmq.protocol import RequestCode, request
    with SyncRemotingClient(addr, timeout=5) as c:
        return c.invoke(request(RequestCode.GET_ALL_TOPIC_CONFIG)).body


def test_suggest_which_broker_id(start_broker, namesrv):
    """slaveReadEnable and a backlog over accessMessageInMemoryMaxRatio (0 % here: any)
    suggest brokerId 1; without slaveReadEnable always 0, as 4.9.x answers."""
    on = start_broker(namesrv, settings={"slaveReadEnable": "true", "accessMessageInMemoryMaxRatio": 0})
    off = start_broker(namesrv, settings={"accessMessageInMemoryMaxRatio": 0})
    for b in (on, off):
        with SyncRemotingClient(b.addr, timeout=5) as c:
            for i in range(10):
                assert send(c, "HSg", b"x%d" % i, queue_id=0).code == 0
            r = pull(c, "HSg", 0, 0, max_nums=2)  # 8 records unread behind the last one pulled
            assert r.code == 0
            assert r.ext_fields["suggestWhichBrokerId"] == ("1" if b is on else "0")


def test_producers_spread_over_masters_and_avoid_a_dead_one(start_broker, namesrv):
    a = start_broker(namesrv, settings={"brokerName": "mm-a"})
    b = start_broker(namesrv, settings={"brokerName": "mm-b"})
    for br in (a, b):
        make_topic(br, "HMulti", 2)
    wait_until(lambda: _route_brokers(namesrv, "HMulti") == {"mm-a", "mm-b"}, what="both masters in the route")
    got = Collector()
    c1 = consumer(namesrv.addr, "hmcg", "HMulti", got)
    c2 = consumer(namesrv.addr, "hmcg", "HMulti", got)
    try:
        with Producer("hmpg", namesrv.addr, local="never", send_latency_fault_enable=True) as p:
            where = [p.send(Message("HMulti", b"m%03d" % i)).queue.broker_name for i in range(40)]
            assert set(where) == {"mm-a", "mm-b"}
            assert got.wait_for(lambda g: len(g.bodies()) >= 40, 60)
            _kill(a)
            after = [p.send(Message("HMulti", b"n%03d" % i)) for i in range(40)]
            assert all(r.status.value == "SEND_OK" for r in after)
            assert {r.queue.broker_name for r in after} == {"mm-b"}
        assert got.wait_for(lambda g: {b"n%03d" % i for i in range(40)} <= g.bodies(), 60)
    finally:
        c1.shutdown()
        c2.shutdown()


def _route_brokers(namesrv, topic):
    from shmq.protocol import RequestCode, request
    from shmq.protocol.bodies import decode_topic_route
    with SyncRemotingClient(namesrv.addr, timeout=5) as c:
        r = c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic))
    return {bd.brokerName for bd in decode_topic_route(r.body).brokerDatas} if r.code == 0 else set()
