"""Consumers: orderly, broadcasting, clustering under churn, retry, over TCP and the local path."""
from __future__ import annotations

import collections
import random
import threading
import time

import pytest

from shmq import ConsumeResult, Message, Producer, PullConsumer, PushConsumer

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import CONSUMER_FAST, FAST, Collector, consumer, make_topic, wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401


@pytest.fixture
def env(namesrv, start_broker):
    b = start_broker(namesrv, settings=FAST)
    return namesrv, b


def test_orderly_steps_arrive_in_order(env):
    """3 consumers, 16 queues, 100 orders x 50 steps sent with send_orderly."""
    ns, b = env
    make_topic(b, "Orders", 16)
    wait_route(ns.addr, "Orders")
    seen: dict[int, list[int]] = collections.defaultdict(list)
    lock = threading.Lock()
    total = [0]
    done = threading.Event()

    def listener(msgs):
        with lock:
            for m in msgs:
                order, step = map(int, m.body.split(b":"))
                seen[order].append(step)
                total[0] += 1
            if total[0] >= 5000:
                done.set()
        return ConsumeResult.SUCCESS

    cs = []
    for i in range(3):
        c = PushConsumer("og", ns.addr, orderly=True, local="never" if i else "always",
                         consume_from="FIRST_OFFSET", **CONSUMER_FAST)
        c.subscribe("Orders", "*")
        c.on_message(listener)
        cs.append(c.start())
    try:
        with Producer("opg", ns.addr, local="auto") as p:
            for step in range(50):
                for order in range(100):
                    p.send_orderly(Message("Orders", b"%d:%d" % (order, step)),
                                   lambda qs, m, arg: qs[arg % len(qs)], order)
        assert done.wait(60), total[0]
    finally:
        for c in cs:
            c.shutdown()
    assert len(seen) == 100
    for order, steps in seen.items():
        # When a queue moves to another consumer at a rebalance, the new owner starts from the
        # committed offset, so a few steps may come twice (at least once); but no step is ever
        # seen before the steps that precede it.
        assert list(dict.fromkeys(steps)) == list(range(50)), (order, steps[:60])


@pytest.mark.parametrize("local", ["never", "always"])
def test_broadcasting_every_consumer_gets_everything(env, local, tmp_path):
    ns, b = env
    make_topic(b, "News", 4)
    wait_route(ns.addr, "News")
    cols = [Collector() for _ in range(3)]
    cs = [consumer(ns.addr, "bg", "News", col, local=local, model="BROADCASTING",
                   offset_store_dir=str(tmp_path / f"c{i}")) for i, col in enumerate(cols)]
    try:
        time.sleep(0.5)
        with Producer("bpg", ns.addr) as p:
            for i in range(200):
                p.send(Message("News", b"n%d" % i))
        for col in cols:
            assert col.wait_for(lambda s: len(s.bodies()) >= 200), len(col.bodies())
    finally:
        for c in cs:
            c.shutdown()
    for col in cols:
        assert col.bodies() == {b"n%d" % i for i in range(200)}


def test_clustering_under_churn_loses_nothing(env):
    """Consumers join and leave while 50,000 messages flow: nothing lost; duplicates happen
    only around rebalances (counted and reported)."""
    ns, b = env
    make_topic(b, "Churn", 8)
    wait_route(ns.addr, "Churn")
    n = 50_000
    col = Collector()
    rng = random.Random(11)
    members = [consumer(ns.addr, "chg", "Churn", col, local="never")]
    stop = threading.Event()

    def produce():
        with Producer("chp", ns.addr, local="always") as p:
            batch = []
            for i in range(n):
                batch.append(Message("Churn", b"%d" % i))
                if len(batch) == 50:
                    p.send_batch(batch)
                    batch = []
        stop.set()
    t = threading.Thread(target=produce)
    t.start()
    try:
        while not stop.is_set():
            time.sleep(rng.uniform(0.3, 0.8))
            if len(members) < 3 and (len(members) == 1 or rng.random() < 0.6):
                members.append(consumer(ns.addr, "chg", "Churn", col, local=rng.choice(["never", "always"])))
            else:
                members.pop(rng.randrange(len(members))).shutdown()
        t.join()
        assert col.wait_for(lambda s: len(s.seen) >= n, timeout=90), len(col.seen)
    finally:
        stop.set()
        t.join()
        for c in members:
            c.shutdown()
    assert set(col.seen) == {b"%d" % i for i in range(n)}
    dups = sum(c - 1 for c in col.seen.values())
    print(f"churn: {n} messages, {dups} duplicate deliveries ({100 * dups / n:.2f}%)")


@pytest.mark.parametrize("local,threads", [("never", 20), ("always", 20), ("always", 0)])
def test_retry_after_two_failures(env, local, threads):
    """A listener that fails twice then succeeds receives the message three times; the
    redelivered copies carry reconsume times 1 and 2 (also when the local pull thread calls
    the listener itself, consume_threads=0)."""
    ns, b = env
    make_topic(b, "Jobs", 2)
    wait_route(ns.addr, "Jobs")
    col = Collector(fail_first=2)
    c = consumer(ns.addr, "rg", "Jobs", col, local=local, consume_threads=threads)
    try:
        with Producer("rpg", ns.addr) as p:
            p.send(Message("Jobs", b"job-1", tags="x"))
        assert col.wait_for(lambda s: s.seen[b"job-1"] >= 3, timeout=30), col.seen
        time.sleep(0.5)
    finally:
        c.shutdown()
    assert col.seen[b"job-1"] == 3
    copies = [m for m in col.msgs if m.body == b"job-1"]
    assert [m.reconsume_times for m in copies] == [0, 1, 2]
    assert all(m.topic == "Jobs" and m.tags == "x" for m in copies)


def test_local_consumer_calling_the_listener_itself_gets_each_queue_in_order(env):
    """consume_threads=0 on the local path: the thread that reads the store calls the listener
    (never the client's loop thread); every message arrives once, each queue in send order,
    with its tags, keys and properties."""
    ns, b = env
    make_topic(b, "Inline", 4)
    wait_route(ns.addr, "Inline")
    got, threads, lock = collections.defaultdict(list), set(), threading.Lock()

    def listener(msgs):
        with lock:
            threads.add(threading.current_thread())
            for m in msgs:
                got[m.queue_id].append((m.queue_offset, m.body, m.tags, m.keys, m.properties.get("p")))
        return ConsumeResult.SUCCESS
    c = consumer(ns.addr, "ig", "Inline", listener, local="always", consume_threads=0, consume_batch_size=4)
    n = 400
    try:
        with Producer("ipg", ns.addr, local="always") as p:
            for i in range(n):
                p.send(Message("Inline", b"m%d" % i, tags="t%d" % (i % 3), keys=["k%d" % i],
                               properties={"p": "\u00e9%d" % i}))
        deadline = time.monotonic() + 30
        while sum(len(v) for v in got.values()) < n and time.monotonic() < deadline:
            time.sleep(0.05)
        loop_thread = c.instance._thread
    finally:
        c.shutdown()
    rows = [r for q in got.values() for r in q]
    assert sorted(int(r[1][1:]) for r in rows) == list(range(n))  # each once
    for q in got.values():
        assert [r[0] for r in q] == sorted(r[0] for r in q)  # in queue order
        assert all(int(r[1][1:]) % 3 == int(r[2][1:]) and r[3] == ["k" + r[1][1:].decode()]
                   and r[4] == "\u00e9" + r[1][1:].decode() for r in q)
    assert len(threads) == 1 and loop_thread not in threads


def test_pull_consumer_poll_seek_commit(env):
    ns, b = env
    make_topic(b, "Lite", 2)
    wait_route(ns.addr, "Lite")
    with Producer("lpg", ns.addr) as p:
        for i in range(30):
            p.send(Message("Lite", b"%d" % i))
    pc = PullConsumer("lite", ns.addr, consume_from="FIRST_OFFSET", auto_commit=False, **CONSUMER_FAST)
    pc.subscribe("Lite", "*")
    pc.start()
    try:
        got = []
        deadline = time.monotonic() + 20
        while len(got) < 30 and time.monotonic() < deadline:
            got += pc.poll(1.0)
        assert sorted(int(m.body) for m in got) == list(range(30))
        pc.commit()
        mq = [q for q in sorted(pc.assignment()) if q.topic == "Lite"][0]
        pc.seek(mq, 0)
        again = []
        deadline = time.monotonic() + 10
        while len(again) < 5 and time.monotonic() < deadline:
            again += [m for m in pc.poll(0.5) if m.queue_id == mq.queue_id]
        assert again and again[0].queue_offset == 0
    finally:
        pc.shutdown()
