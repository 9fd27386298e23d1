"""The outgrow path: shmq's own Python client (over TCP, local="never") does what a user does
with it against shmq and, unchanged, against Apache RocketMQ 4.9.7. Every test runs on both.
"""
from __future__ import annotations

import collections
import threading
import time

import pytest

from shmq import (ConsumeResult, LocalTransactionState, Message, MessageSelector, Producer,
                  PullConsumer, PushConsumer, SendStatus, TransactionProducer)
from tests.integration.client_helpers import CONSUMER_FAST, Collector

from .conftest import unique


def push(t, group, topic, listener, expr="*", **kw):
    opts = dict(CONSUMER_FAST, consume_from="FIRST_OFFSET", local="never")
    opts.update(kw)
    c = PushConsumer(group, t.namesrv, **opts)
    c.subscribe(topic, expr)
    c.on_message(listener)
    return c.start()


def collect(t, topic, n, expr="*", timeout=30.0, settle=0.0, **kw):
    col = Collector()
    c = push(t, unique("cg"), topic, col, expr, **kw)
    try:
        col.wait_for(lambda s: len(s.msgs) >= n, timeout)
        time.sleep(settle)  # what must not come has had time to
    finally:
        c.shutdown()
    return col.msgs


def producer(t, **kw):
    return Producer(unique("pg"), t.namesrv, local="never", **kw)


def test_every_send_mode(target):
    topic = unique("Modes")
    target.create_topic(topic, 4)
    with producer(target) as p:
        r = p.send(Message(topic, b"sync", tags="A", keys=["k-sync"], properties={"u": "1"}))
        assert r.status is SendStatus.SEND_OK and len(r.msg_id) == 32
        fut = p.send_async(Message(topic, b"async", tags="B"))
        called = threading.Event()
        p.send_async(Message(topic, b"async-cb"), callback=lambda res: called.set())
        assert fut.result(10).status is SendStatus.SEND_OK and called.wait(10)
        p.send_oneway(Message(topic, b"oneway"))
        rb = p.send_batch([Message(topic, b"batch-%d" % i, keys=f"bk{i}") for i in range(10)])
        assert rb.msg_id.count(",") == 9
        ro = p.send_orderly(Message(topic, b"orderly"), lambda qs, m, arg: qs[arg % len(qs)], 3)
        assert ro.queue.queue_id == 3
        big = bytes(range(256)) * 40  # compressed on the wire, not for the consumer
        assert p.send(Message(topic, big)).status is SendStatus.SEND_OK
    msgs = collect(target, topic, 16)
    by_body = {m.body: m for m in msgs}
    assert set(by_body) == {b"sync", b"async", b"async-cb", b"oneway", b"orderly", big,
                            *(b"batch-%d" % i for i in range(10))}
    s = by_body[b"sync"]
    assert s.tags == "A" and s.keys == ["k-sync"] and s.properties["u"] == "1" and s.msg_id == r.msg_id
    assert by_body[b"orderly"].queue_id == 3
    batch = sorted((m for m in msgs if m.body.startswith(b"batch-")), key=lambda m: m.queue_offset)
    assert len({m.queue_id for m in batch}) == 1
    assert [m.queue_offset for m in batch] == list(range(batch[0].queue_offset, batch[0].queue_offset + 10))


def test_orderly_consumers_see_each_order_in_order(target):
    topic, group = unique("Orders"), unique("og")
    target.create_topic(topic, 8)
    seen: dict[int, list[int]] = collections.defaultdict(list)
    lock, done, total = threading.Lock(), threading.Event(), [0]

    def listener(msgs):
        with lock:
            for m in msgs:
                order, step = map(int, m.body.split(b":"))
                seen[order].append(step)
                total[0] += 1
            if total[0] >= 400:
                done.set()
        return ConsumeResult.SUCCESS

    cs = [push(target, group, topic, listener, orderly=True) for _ in range(2)]
    try:
        with producer(target) as p:
            for step in range(20):
                for order in range(20):
                    p.send_orderly(Message(topic, b"%d:%d" % (order, step)),
                                   lambda qs, m, arg: qs[arg % len(qs)], order)
        assert done.wait(60), total[0]
    finally:
        for c in cs:
            c.shutdown()
    assert len(seen) == 20
    for order, steps in seen.items():
        assert list(dict.fromkeys(steps)) == list(range(20)), (order, steps)


def test_delay_level_holds_the_message_back(target):
    topic = unique("Delay")
    target.create_topic(topic, 2)
    with producer(target) as p:
        t0 = time.time()
        p.send(Message(topic, b"later", delay_level=2))  # 1 s on both brokers (messageDelayLevel)
        p.send(Message(topic, b"now"))
    msgs = collect(target, topic, 2)
    by_body = {m.body: m for m in msgs}
    assert set(by_body) == {b"later", b"now"}
    late = by_body[b"later"]
    # stored again when its level elapsed: the second store time is a second after the send
    assert late.store_timestamp / 1000 - t0 >= 0.9, (late.store_timestamp, t0)
    assert late.properties.get("REAL_TOPIC") == topic


class TxListener:
    def __init__(self, local_answer, check_answer=None):
        self.local_answer, self.check_answer, self.checks = local_answer, check_answer, []

    def execute_local_transaction(self, msg, arg):
        return self.local_answer

    def check_local_transaction(self, msg):
        self.checks.append(msg.body)
        return self.check_answer


def test_transactions_commit_rollback_and_check_back(target):
    topic = unique("Tx")
    target.create_topic(topic, 2)
    lst = TxListener(LocalTransactionState.COMMIT_MESSAGE, LocalTransactionState.COMMIT_MESSAGE)
    with TransactionProducer(unique("txg"), target.namesrv, local="never", listener=lst) as tp:
        r = tp.send_in_transaction(Message(topic, b"committed"))
        assert r.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        lst.local_answer = LocalTransactionState.ROLLBACK_MESSAGE
        tp.send_in_transaction(Message(topic, b"rolled back"))
        lst.local_answer = LocalTransactionState.UNKNOW
        tp.send_in_transaction(Message(topic, b"checked"))
        deadline = time.monotonic() + 40  # Apache checks on its own period (1 s here) and age
        while not lst.checks and time.monotonic() < deadline:
            time.sleep(0.1)
        assert lst.checks[:1] == [b"checked"]
        got = sorted(m.body for m in collect(target, topic, 2, settle=1.0))
    assert got == [b"checked", b"committed"]


def test_tag_and_sql92_filters(target):
    topic = unique("Filter")
    target.create_topic(topic, 2)
    rows = [("A", {"a": "7", "region": "eu"}), ("B", {"a": "3", "region": "eu"}),
            ("A", {"a": "9", "region": "asia"}), ("C", {"region": "us"}), ("B", {"a": "6", "region": "us"})]
    with producer(target) as p:
        for i, (tag, props) in enumerate(rows):
            p.send(Message(topic, b"%d" % i, tags=tag, properties=props))
    tagged = sorted(m.body for m in collect(target, topic, 3, expr="A || C", settle=1.0))
    assert tagged == [b"0", b"2", b"3"]
    sql = sorted(m.body for m in collect(target, topic, 2, settle=1.0,
                                         expr=MessageSelector.sql("a > 5 AND region IN ('eu','us')")))
    assert sql == [b"0", b"4"]


def test_broadcasting_every_consumer_gets_everything(target, tmp_path):
    topic, group = unique("News"), unique("bg")
    target.create_topic(topic, 4)
    cols = [Collector() for _ in range(2)]
    cs = [push(target, group, topic, col, model="BROADCASTING", offset_store_dir=str(tmp_path / f"c{i}"))
          for i, col in enumerate(cols)]
    try:
        time.sleep(1.0)
        with producer(target) as p:
            for i in range(40):
                p.send(Message(topic, b"%d" % i))
        for col in cols:
            assert col.wait_for(lambda s: len(s.bodies()) >= 40, 30), len(col.bodies())
    finally:
        for c in cs:
            c.shutdown()
    for col in cols:
        assert col.bodies() == {b"%d" % i for i in range(40)}


def test_retry_after_failures_comes_back(target):
    topic = unique("Jobs")
    target.create_topic(topic, 2)
    col = Collector(fail_first=2)
    c = push(target, unique("rg"), topic, col)
    try:
        with producer(target) as p:
            p.send(Message(topic, b"job", tags="x"))
        assert col.wait_for(lambda s: s.seen[b"job"] >= 3, 60), col.seen
    finally:
        c.shutdown()
    copies = [m for m in col.msgs if m.body == b"job"]
    assert [m.reconsume_times for m in copies[:3]] == [0, 1, 2]
    assert all(m.topic == topic and m.tags == "x" for m in copies)


def test_committed_offsets_survive_a_new_consumer(target):
    topic, group = unique("Lite"), unique("lite")
    target.create_topic(topic, 2)
    with producer(target) as p:
        for i in range(20):
            p.send(Message(topic, b"%d" % i))
    pc = PullConsumer(group, target.namesrv, consume_from="FIRST_OFFSET", auto_commit=False,
                      local="never", **CONSUMER_FAST)
    pc.subscribe(topic, "*")
    pc.start()
    try:
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 20 and time.monotonic() < deadline:
            got += pc.poll(1.0)
        assert sorted(int(m.body) for m in got) == list(range(20))
        pc.commit()  # sends UPDATE_CONSUMER_OFFSET in the background: read until it is there
        deadline = time.monotonic() + 10
        while True:
            committed = {mq.queue_id: pc.committed(mq) for mq in pc.assignment() if mq.topic == topic}
            if sum(committed.values()) == 20 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        pc.shutdown()
    assert sum(committed.values()) == 20, committed
    with producer(target) as p:
        for i in range(20, 25):
            p.send(Message(topic, b"%d" % i))
    # a new member of the group starts where the last one committed: only the five new ones
    col = Collector()
    c = push(target, group, topic, col)
    try:
        col.wait_for(lambda s: len(s.msgs) >= 5, 30)
        time.sleep(1.5)
    finally:
        c.shutdown()
    assert sorted(int(m.body) for m in col.msgs) == [20, 21, 22, 23, 24]
