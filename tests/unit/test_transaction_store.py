"""Transactions in the store: commit and rollback of half messages, op records, and the check
scan (what is old enough, what is resolved, re-queue and discard after the maximum)."""
import pytest

from shmq.message.layout import TX_COMMIT_TYPE, TX_TYPE_MASK
from shmq.message.record import decode_record
from shmq.store import GetStatus
from shmq.store.put import PutPipeline, PutRequest
from shmq.store.transaction import (COMMIT, HALF_TOPIC, OP_TOPIC, ROLLBACK, HalfScanner, TransactionError,
                                    end_transaction)


def half(p, body=b"order", topic="Orders", qid=1, group="txg"):
    return p.put(PutRequest(topic, body, {"TRAN_MSG": "true", "PGROUP": group, "TAGS": "t"}, queue_id=qid))


def test_commit_puts_the_message_to_its_topic(open_store):
    s = open_store()
    p = PutPipeline(s)
    h = half(p)
    assert h.stored_topic == HALF_TOPIC
    assert s.get_messages("Orders", 1, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE  # invisible
    r = end_transaction(p, h.phys_offset, h.queue_offset, "txg", COMMIT)
    assert r.committed
    got = s.get_messages("Orders", 1, 0)
    m = decode_record(got.messages[0])
    assert bytes(m.body) == b"order" and m.tags == "t"
    assert m.sysflag & TX_TYPE_MASK == TX_COMMIT_TYPE
    assert "TRAN_MSG" not in m.properties and "REAL_TOPIC" not in m.properties
    assert s.max_offset(OP_TOPIC, 0) == 1


def test_rollback_and_wrong_references(open_store):
    s = open_store()
    p = PutPipeline(s)
    h = half(p)
    with pytest.raises(TransactionError, match="group"):
        end_transaction(p, h.phys_offset, h.queue_offset, "othergroup", COMMIT)
    with pytest.raises(TransactionError, match="offset"):
        end_transaction(p, h.phys_offset, h.queue_offset + 5, "txg", COMMIT)
    with pytest.raises(TransactionError):
        end_transaction(p, 999_999, 0, "txg", COMMIT)
    end_transaction(p, h.phys_offset, h.queue_offset, "txg", ROLLBACK)
    assert s.max_offset("Orders", 1) == 0
    assert end_transaction(p, h.phys_offset, h.queue_offset, "txg", 0) is None


def test_scan_checks_old_unresolved_and_discards_after_max(open_store):
    s = open_store()
    p = PutPipeline(s)
    h1, h2, h3 = half(p, b"a"), half(p, b"b"), half(p, b"c")
    end_transaction(p, h2.phys_offset, h2.queue_offset, "txg", COMMIT)
    sc = HalfScanner(s, timeout_ms=0, max_checks=2)
    now = h3.store_timestamp + 10_000
    first = [(bytes(c.msg.body), a) for c, a in sc.scan(now)]
    assert first == [(b"a", "check"), (b"c", "check")]
    # nothing new until re-queued copies exist; re-queue as the service does
    assert list(sc.scan(now)) == []
    young = HalfScanner(s, timeout_ms=60_000)
    half(p, b"d")
    assert list(young.scan()) == []  # too young to check


def test_requeued_copy_is_resolved_by_the_original_answer(open_store):
    s = open_store()
    p = PutPipeline(s)
    h = half(p, b"x")
    sc = HalfScanner(s, timeout_ms=0, max_checks=3)
    [(cand, action)] = list(sc.scan(h.store_timestamp + 1))
    copy = sc.requeue(p, cand)
    # the producer answers the original late: the copy must not be checked again
    end_transaction(p, h.phys_offset, h.queue_offset, "txg", ROLLBACK)
    assert list(sc.scan(copy.store_timestamp + 1)) == []


def test_discard_after_max_checks(open_store):
    s = open_store()
    p = PutPipeline(s)
    h = half(p, b"never answered")
    sc = HalfScanner(s, timeout_ms=0, max_checks=2)
    actions = []
    for _ in range(4):
        for cand, action in sc.scan(h.store_timestamp + 1):
            actions.append(action)
            if action == "check":
                sc.requeue(p, cand)
            else:
                sc.discard(p, cand)
    assert actions == ["check", "check", "discard"]
