"""Helpers for the client tests: a NameServer + broker pair with short intervals, topic
creation, and a collecting listener."""
from __future__ import annotations

import collections
import threading
import time

import pytest

from shmq import ConsumeResult, PushConsumer
from shmq.protocol import SyncRemotingClient

from .broker_helpers import create_topic

FAST = {
    "messageDelayLevel": "100ms 200ms 300ms 400ms 500ms 600ms 700ms 800ms 900ms 1s 1s 1s 1s 1s 1s 1s 1s 1s",
    "channelExpiredTimeout": 4000,
    "clientScanInterval": 500,
}
CONSUMER_FAST = dict(rebalance_interval=1.0, persist_interval=0.5)


def make_topic(broker, topic: str, queues: int = 4) -> None:
    with SyncRemotingClient(broker.addr, timeout=5) as c:
        r = create_topic(c, topic, queues)
        assert r.code == 0, r.remark
    time.sleep(0.05)


def wait_route(namesrv_addr: str, topic: str, timeout: float = 10.0) -> None:
    from shmq.protocol import RequestCode, request
    deadline = time.monotonic() + timeout
    with SyncRemotingClient(namesrv_addr, timeout=5) as c:
        while time.monotonic() < deadline:
            if c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)).code == 0:
                return
            time.sleep(0.05)
    raise AssertionError(f"no route for {topic}")


class Collector:
    """A listener that records every message; ``fail_first`` makes it answer RECONSUME_LATER
    the first n times it sees a given body."""

    def __init__(self, fail_first: int = 0, name: str = ""):
        self.msgs = []
        self.seen = collections.Counter()
        self.lock = threading.RLock()
        self.fail_first = fail_first
        self.name = name
        self.changed = threading.Condition(self.lock)
        self._bodies: set = set()

    def __call__(self, msgs):
        with self.lock:
            for m in msgs:
                self.seen[m.body] += 1
                self._bodies.add(m.body)
            if self.fail_first and any(self.seen[m.body] <= self.fail_first for m in msgs):
                self.msgs.extend(msgs)
                self.changed.notify_all()
                return ConsumeResult.RECONSUME_LATER
            self.msgs.extend(msgs)
            self.changed.notify_all()
        return ConsumeResult.SUCCESS

    def bodies(self) -> set:
        """Every body received (the live set: do not modify)."""
        return self._bodies

    def wait_for(self, pred, timeout: float = 30.0) -> bool:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not pred(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.changed.wait(left)
        return True



@pytest.fixture
def env(namesrv, start_broker):
    """A NameServer and a broker with topic T of 4 queues, routed: (namesrv, broker). Import it
    into a test module with the ``namesrv`` and ``start_broker`` fixtures it asks for."""
    b = start_broker(namesrv)
    make_topic(b, "T", 4)
    wait_route(namesrv.addr, "T")
    return namesrv, b

def consumer(namesrv_addr: str, group: str, topic: str, listener, *, local: str = "never",
             expr: str = "*", **kw) -> PushConsumer:
    opts = dict(CONSUMER_FAST, consume_from="FIRST_OFFSET")
    opts.update(kw)
    c = PushConsumer(group, namesrv_addr, local=local, **opts)
    c.subscribe(topic, expr)
    c.on_message(listener)
    return c.start()
