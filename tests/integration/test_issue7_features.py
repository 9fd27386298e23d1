"""Transactions, SQL92 filters, query by key, back-tracking and DLQ re-send, end to end over
TCP and the local path, with shortened intervals."""
from __future__ import annotations

import time

import pytest

from shmq import (LocalTransactionState, Message, MessageSelector, Producer,
                  TransactionProducer)
from shmq.client.admin import Admin
from shmq.errors import FilterExpressionError

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import FAST, Collector, consumer, make_topic, wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401

TX = dict(FAST, transactionTimeOut=300, transactionCheckInterval=300, transactionCheckMax=3,
          enablePropertyFilter="true")


class Listener:
    def __init__(self, local_answer, check_answer=None):
        self.local_answer = local_answer
        self.check_answer = check_answer
        self.checks = []

    def execute_local_transaction(self, msg, arg):
        return self.local_answer

    def check_local_transaction(self, msg):
        self.checks.append(msg.body)
        if self.check_answer is None:
            raise RuntimeError("this producer never answers")  # -> UNKNOW
        return self.check_answer


@pytest.fixture
def env(namesrv, start_broker):
    b = start_broker(namesrv, settings=TX)
    make_topic(b, "Tx", 2)
    wait_route(namesrv.addr, "Tx")
    return namesrv, b


def visible(ns, topic, n, group, timeout=15.0, local="never", **kw):
    col = Collector()
    c = consumer(ns.addr, group, topic, col, local=local, **kw)
    try:
        col.wait_for(lambda s: len(s.msgs) >= n, timeout=timeout)
        time.sleep(0.3)
    finally:
        c.shutdown()
    return sorted(m.body for m in col.msgs)


@pytest.mark.parametrize("local", ["never", "always"])
def test_commit_and_rollback(env, local):
    ns, _ = env
    with TransactionProducer("txg-" + local, ns.addr, local=local,
                             listener=Listener(LocalTransactionState.COMMIT_MESSAGE)) as tp:
        r = tp.send_in_transaction(Message("Tx", b"committed", tags="t"))
        assert r.local_transaction_state is LocalTransactionState.COMMIT_MESSAGE
        tp.listener.local_answer = LocalTransactionState.ROLLBACK_MESSAGE
        tp.send_in_transaction(Message("Tx", b"rolled back"))
    assert visible(ns, "Tx", 1, "txc-" + local) == [b"committed"]


@pytest.mark.parametrize("check_answer,expected", [
    (LocalTransactionState.COMMIT_MESSAGE, [b"unknown-then-checked"]),
    (LocalTransactionState.ROLLBACK_MESSAGE, []),
])
def test_unknown_then_checked(env, check_answer, expected):
    ns, _ = env
    lst = Listener(LocalTransactionState.UNKNOW, check_answer)
    with TransactionProducer("txu", ns.addr, local="never", listener=lst) as tp:
        tp.send_in_transaction(Message("Tx", b"unknown-then-checked"))
        deadline = time.monotonic() + 20
        while not lst.checks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lst.checks == [b"unknown-then-checked"]
        time.sleep(0.5)
    got = visible(ns, "Tx", len(expected), "txu-c", timeout=5 if not expected else 15)
    assert got == expected


def test_never_answered_is_discarded_after_the_maximum(env):
    ns, b = env
    lst = Listener(LocalTransactionState.UNKNOW, None)
    with TransactionProducer("txn", ns.addr, local="never", listener=lst) as tp:
        tp.send_in_transaction(Message("Tx", b"limbo"))
        deadline = time.monotonic() + 30
        while len(lst.checks) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        time.sleep(1.5)  # rounds after the third: discarded, not asked again
        assert len(lst.checks) == 3
    assert visible(ns, "Tx", 0, "txn-c", timeout=2) == []


def test_unresolved_half_message_is_checked_after_a_restart(namesrv, start_broker):
    # checks count even while no producer is there to answer: allow enough of them to outlive
    # the restart
    ns, settings = namesrv, dict(TX, transactionCheckMax=1000)
    b = start_broker(ns, settings=settings)
    make_topic(b, "Tx", 2)
    wait_route(ns.addr, "Tx")
    lst = Listener(LocalTransactionState.UNKNOW, None)
    with TransactionProducer("txr", ns.addr, local="never", listener=lst) as tp:
        tp.send_in_transaction(Message("Tx", b"across restart"))
    assert b.stop(timeout=20) == 0
    b2 = start_broker(ns, settings=settings, store=b.store, port=b.port)
    lst2 = Listener(LocalTransactionState.UNKNOW, LocalTransactionState.COMMIT_MESSAGE)
    with TransactionProducer("txr", ns.addr, local="never", listener=lst2) as tp2:
        deadline = time.monotonic() + 20
        while not lst2.checks and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lst2.checks[:1] == [b"across restart"]
        time.sleep(0.5)
    assert b2.alive()
    assert visible(ns, "Tx", 1, "txr-c") == [b"across restart"]


@pytest.mark.parametrize("local", ["never", "always"])
def test_sql92_filter(env, local):
    ns, b = env
    make_topic(b, "Sql", 2)
    wait_route(ns.addr, "Sql")
    rows = [{"a": "7", "region": "eu"}, {"a": "3", "region": "eu"}, {"a": "9", "region": "asia"},
            {"region": "us"}, {"a": "x", "region": "us"}, {"a": "6", "region": "us"}]
    with Producer("sqlp", ns.addr) as p:
        for i, props in enumerate(rows):
            p.send(Message("Sql", b"%d" % i, properties=props))
    got = visible(ns, "Sql", 2, "sqlc-" + local, local=local,
                  expr=MessageSelector.sql("a > 5 AND region IN ('eu','us')"))
    assert got == [b"0", b"5"]
    with pytest.raises(FilterExpressionError):
        consumer(ns.addr, "sqlbad", "Sql", Collector(), expr=MessageSelector.sql("a > AND"))


def test_reset_offset_back_and_forward_while_consuming(env):
    ns, b = env
    make_topic(b, "Back", 2)
    wait_route(ns.addr, "Back")
    with Producer("backp", ns.addr) as p:
        for i in range(40):
            p.send(Message("Back", b"old-%d" % i))
        time.sleep(0.05)
        mark = int(time.time() * 1000)
        time.sleep(0.05)
        for i in range(20):
            p.send(Message("Back", b"new-%d" % i))
    col = Collector()
    c = consumer(ns.addr, "backg", "Back", col)
    try:
        assert col.wait_for(lambda s: len(s.msgs) >= 60)
        time.sleep(1.2)
        with Admin(ns.addr) as a:
            table = a.reset_offset("backg", "Back", mark)   # back: the 20 "new" ones again
        assert sum(table.values()) == 40
        assert col.wait_for(lambda s: len(s.msgs) >= 80)
        time.sleep(0.5)
        again = [m.body for m in col.msgs[60:]]
        assert sorted(again) == sorted(b"new-%d" % i for i in range(20))
        with Admin(ns.addr) as a:
            table = a.reset_offset("backg", "Back", int(time.time() * 1000) + 1000)  # forward to now
        assert sum(table.values()) == 60
    finally:
        c.shutdown()
    with Admin(ns.addr) as a:
        rows = a.consumer_progress("backg", ["Back"])
    assert sum(r.lag for r in rows) == 0


def test_dead_letters_are_resent(env):
    ns, b = env
    make_topic(b, "Dl", 1)
    wait_route(ns.addr, "Dl")
    col = Collector(fail_first=10 ** 6)  # never succeeds
    c = consumer(ns.addr, "dlg", "Dl", col, max_reconsume_times=2)
    try:
        with Producer("dlp", ns.addr) as p:
            p.send(Message("Dl", b"poison", tags="bad", properties={"k": "v"}))
        assert col.wait_for(lambda s: s.seen[b"poison"] >= 3, timeout=30)
        time.sleep(1.0)
    finally:
        c.shutdown()
    with Admin(ns.addr) as a:
        wait_route(ns.addr, "%DLQ%dlg")
        with Producer("resend", ns.addr) as p:
            assert a.dlq_resend("dlg", p) == 1
    got = Collector()
    c2 = consumer(ns.addr, "dl-after", "Dl", got)
    try:
        assert got.wait_for(lambda s: len(s.msgs) >= 2)  # the original and the re-sent copy
    finally:
        c2.shutdown()
    assert [m.tags for m in got.msgs] == ["bad", "bad"]
    assert all(m.properties.get("k") == "v" for m in got.msgs)


def test_query_by_key_across_many_files(namesrv, start_broker):
    b = start_broker(namesrv, settings=dict(FAST, mappedFileSizeCommitLog=64 * 1024, maxHashSlotNum=64,
                                            maxIndexNum=256))
    make_topic(b, "Q", 2)
    wait_route(namesrv.addr, "Q")
    with Producer("qp", namesrv.addr) as p:
        for i in range(600):
            p.send(Message("Q", b"%d" % i + b"." * 300, keys=[f"user-{i % 7}", f"id-{i}"]))
            if i % 50 == 49:  # the local send path stores 600 in ~4 ms: spread them over
                time.sleep(0.005)  # several milliseconds so the end_ms query below has older ones
    time.sleep(1.5)
    with Admin(namesrv.addr) as a:
        # a query answers at most 64 (RocketMQ's maxMsgsNumBatch): the newest ones, which here
        # reach back through several 256-entry index files
        found = a.query_by_key("Q", "user-3", max_num=64)
        assert sorted(int(m.body.split(b".")[0]) for m in found) == list(range(3, 600, 7))[-64:]
        old = a.query_by_key("Q", "user-3", max_num=64, end_ms=min(m.store_timestamp for m in found) - 1)
        assert old and all(int(m.body.split(b".")[0]) % 7 == 3 for m in old)
        assert [int(m.body.split(b".")[0]) for m in a.query_by_key("Q", "id-599")] == [599]
        assert a.query_by_key("Q", "nobody") == []
