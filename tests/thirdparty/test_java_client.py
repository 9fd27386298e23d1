"""Apache RocketMQ's Java client (rocketmq-client 4.9.8) against shmq: NameServer + a broker of
2 workers, so a client's connections land on different worker processes.

Each test runs several scenarios of ``java/Harness.java`` in one JVM (see its header) and
asserts on what the client saw: every message sent is received exactly once, orderly keeps
the order per queue, filters let through exactly what matches, a delayed message is not
delivered before its level's time, a transaction's commit / rollback / check-back decide
what is delivered, clustering splits the queues and broadcasting gives everything to
everyone, request-reply answers.
"""
from __future__ import annotations

from collections import Counter

import pytest

from tests.integration.broker_helpers import create_topic, start_broker  # noqa: F401
from tests.integration.conftest import namesrv, processes, start_namesrv  # noqa: F401
from shmq.protocol import SyncRemotingClient

from . import jvm
from .harnesses import java_scenarios

BROKER_SETTINGS = {"enablePropertyFilter": "true", "transactionCheckInterval": 500, "transactionTimeOut": 500}


def _run(namesrv, start_broker, tmp_path, scenarios: list[str]) -> dict[str, dict]:
    jvm.require_java()
    try:
        from .harnesses import harness_cp
        harness_cp()
    except jvm.Unavailable as e:
        pytest.skip(f"rocketmq-client 4.9.8 unavailable: {e}")
    br = start_broker(namesrv=namesrv, workers=2, settings=BROKER_SETTINGS)
    c = SyncRemotingClient(br.addr, timeout=10)
    try:
        for s in scenarios:
            assert create_topic(c, f"jc_{s}", queues=4).code == 0
    finally:
        c.close()
    return java_scenarios(namesrv.addr, "jc", scenarios, tmp_path / "java-logs")


def _once(received: list[dict], sent: list[str]) -> None:
    counts = Counter(r["body"] for r in received)
    dup = {b: n for b, n in counts.items() if n > 1}
    assert not dup, f"delivered more than once: {dup}"
    assert sorted(counts) == sorted(sent), f"missing {set(sent) - set(counts)}, unexpected {set(counts) - set(sent)}"


def _check(results: dict[str, dict], checks: dict) -> None:
    failures = []
    for name, check in checks.items():
        r = results[name]
        try:
            assert "error" not in r, r["error"]
            check(r)
        except AssertionError as e:
            failures.append(f"{name}: {e}")
    assert not failures, "\n".join(failures)


def check_send_modes(r):
    assert r["syncStatus"] == ["SEND_OK"] * 10
    assert len(set(r["syncIds"])) == 10 and len(r["asyncIds"]) == 10
    assert not [i for i in r["asyncIds"] if i.startswith("error")], r["asyncIds"]
    assert r["batchStatus"] == "SEND_OK" and len(r["batchIds"].split(",")) == 10
    _once(r["received"], r["sent"])
    by_body = {m["body"]: m["msgId"] for m in r["received"]}
    assert [by_body[f"sync-{i}"] for i in range(10)] == r["syncIds"]  # the ids the sender was given
    assert {m["tags"] for m in r["received"]} == {"sync", "async", "oneway", "batch"}


def check_orderly(r):
    _once(r["received"], r["sent"])
    assert r["locked"] == [0, 1, 2, 3]
    per_queue: dict[int, list[str]] = {}
    for m in r["received"]:
        per_queue.setdefault(m["queue"], []).append(m["body"])
    for q, bodies in per_queue.items():
        orders = {b.split("-")[0] for b in bodies}
        assert len(orders) == 1, f"queue {q} mixes order ids {orders}"
        seqs = [int(b.split("-")[1]) for b in bodies]
        assert seqs == sorted(seqs) == list(range(15)), f"queue {q} out of order: {seqs}"


def check_delay(r):
    _once(r["received"], r["sent"])
    for m in r["received"]:
        if m["body"].startswith("delay"):
            assert m["afterBorn"] >= 4500, f"level 2 (5 s) delivered after {m['afterBorn']} ms"
        else:
            assert m["afterBorn"] < 4000


def check_transaction(r):
    assert r["states"] == ["COMMIT_MESSAGE"] * 3 + ["ROLLBACK_MESSAGE"] * 3 + ["UNKNOW"] * 3
    _once(r["received"], [f"commit-{i}" for i in range(3)] + [f"unknown-{i}" for i in range(3)])
    assert sorted(set(r["checks"])) == [f"unknown-{i}" for i in range(3)], r["checks"]


def check_request_reply(r):
    assert r["replies"] == [f"re:ask-{i}" for i in range(3)]


def check_clustering(r):
    qa, qb = set(r["queuesA"]), set(r["queuesB"])
    assert not qa & qb and qa | qb == {0, 1, 2, 3} and len(qa) == len(qb) == 2, (qa, qb)
    _once(r["receivedA"] + r["receivedB"], r["sent"])
    assert {m["queue"] for m in r["receivedA"]} <= qa and {m["queue"] for m in r["receivedB"]} <= qb


def check_broadcasting(r):
    assert r["queuesA"] == r["queuesB"] == [0, 1, 2, 3]
    _once(r["receivedA"], r["sent"])
    _once(r["receivedB"], r["sent"])


def check_tag_filter(r):
    _once(r["received"], [b for i, b in enumerate(r["sent"]) if i % 3 != 2])
    assert {m["tags"] for m in r["received"]} == {"TagA", "TagB"}


def check_sql_filter(r):
    _once(r["received"], [b for i, b in enumerate(r["sent"]) if 3 <= i % 10 <= 6])


def check_lite_subscribe(r):
    _once([{"body": b} for b in r["received"]], r["sent"])


def check_lite_assign(r):
    assert r["assigned"] == [0, 1]
    mine = [b for b, q in r["sentQueue"].items() if q < 2]
    for rnd in ("received", "afterSeek"):
        _once(r[rnd], mine)
        for m in r[rnd]:
            assert m["queue"] == r["sentQueue"][m["body"]]


def test_java_producer_send_modes_orderly_delay_transaction_reply(namesrv, start_broker, tmp_path):
    checks = {"send_modes": check_send_modes, "orderly": check_orderly, "delay": check_delay,
              "transaction": check_transaction, "request_reply": check_request_reply}
    _check(_run(namesrv, start_broker, tmp_path, list(checks)), checks)


def test_java_push_and_lite_pull_consumers(namesrv, start_broker, tmp_path):
    checks = {"clustering": check_clustering, "broadcasting": check_broadcasting, "tag_filter": check_tag_filter,
              "sql_filter": check_sql_filter, "lite_subscribe": check_lite_subscribe,
              "lite_assign": check_lite_assign}
    _check(_run(namesrv, start_broker, tmp_path, list(checks)), checks)
