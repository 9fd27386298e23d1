"""Which broker a consumer pulls from (ClientInstance.read_addr, RocketMQ's
findBrokerAddressInSubscribe): the suggested one while it is reachable, another of the same
name while it is marked unreachable, the suggested one again once the mark has passed. The
usual case reads no clock while nothing was ever marked (a TCP consumer asks once per pull)."""
from __future__ import annotations

from types import SimpleNamespace

from shmq.client import instance as instance_mod
from shmq.client.instance import ClientInstance

MASTER, SLAVE = "127.0.0.1:10911", "127.0.0.1:10921"


def _inst(unreachable=None):
    inst = SimpleNamespace(broker_addrs={"b": {0: MASTER, 1: SLAVE}}, _unreachable=unreachable or {})
    return ClientInstance.read_addr.__get__(inst), inst


def test_master_while_nothing_is_marked_and_no_clock_read(monkeypatch):
    def no_clock():
        raise AssertionError("the usual case read the clock")
    read, _ = _inst()
    monkeypatch.setattr(instance_mod.time, "monotonic", no_clock)
    assert read("b", 0) == (MASTER, False)
    assert read("b", 1) == (SLAVE, True)  # the slave a pull answer suggested


def test_unreachable_master_gives_the_slave_until_its_mark_passes(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(instance_mod.time, "monotonic", lambda: now[0])
    read, inst = _inst({MASTER: 105.0})
    assert read("b", 0) == (SLAVE, True)
    now[0] = 105.0
    assert read("b", 0) == (MASTER, False)
    inst._unreachable[SLAVE] = 200.0  # another address marked: the master's answer reads the clock again
    assert read("b", 0) == (MASTER, False)


def test_unknown_broker():
    read, _ = _inst()
    assert read("nope", 0) == (None, False)
