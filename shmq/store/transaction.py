"""Transactional messages in the store (RocketMQ's TransactionalMessageServiceImpl and
EndTransactionProcessor, shared by the broker and local producers):

- a half message is stored by the put pipeline in RMQ_SYS_TRANS_HALF_TOPIC queue 0, its real
  topic and queue in REAL_TOPIC / REAL_QID (invisible to consumers);
- ``end_transaction`` commits it (re-put to the real topic and queue, transaction type COMMIT,
  TRAN_MSG and the REAL_* properties cleared, a delay applied then) or rolls it back, and in
  both cases writes an op record to RMQ_SYS_TRANS_OP_HALF_TOPIC (tag "d", body = the half
  message's queue offset as text) so the check service knows it is resolved;
- ``HalfScanner`` is the check service's store side: it walks the half queue from its
  progress offset, skips what the op queue says is resolved, and yields the half messages
  that are old enough to be checked (transactionTimeOut, or CHECK_IMMUNITY_TIME_IN_SECONDS).
  Progress is kept as the consumer offsets of group CID_RMQ_SYS_TRANS, as RocketMQ does, so
  it survives restarts with consumerOffset.json.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

from shmq.errors import ShmqError
from shmq.message.layout import TX_COMMIT_TYPE, TX_NOT_TYPE, TX_ROLLBACK_TYPE, TX_TYPE_MASK
from shmq.message.names import (CHECK_IMMUNITY_TIME_IN_SECONDS as P_IMMUNITY, HALF_TOPIC, OP_HALF_TOPIC as OP_TOPIC,
                                PGROUP as P_PGROUP, REAL_QID as P_REAL_QID, REAL_TOPIC as P_REAL_TOPIC, TAGS,
                                TRAN_MSG as P_TRAN_MSG, TRAN_PREPARED_QUEUE_OFFSET as P_PREPARED_QOFF,
                                TRANS_CHECK_GROUP as CHECK_GROUP, TRANSACTION_CHECK_TIMES as P_CHECK_TIMES)
from shmq.message.properties import encode_properties
from shmq.message.record import decode_record

OP_TAG = "d"
#: END_TRANSACTION's commitOrRollback values: the sysFlag transaction types
COMMIT, ROLLBACK, UNKNOWN = TX_COMMIT_TYPE, TX_ROLLBACK_TYPE, TX_NOT_TYPE


class TransactionError(ShmqError):
    """END_TRANSACTION refers to no matching half message (answered SYSTEM_ERROR, as RocketMQ)."""
    code = 1


@dataclass
class EndResult:
    committed: bool
    result: object | None   # the pipeline result of the committed message, None on rollback
    half_queue_offset: int


def read_half(store, commit_log_offset: int):
    rec = store.read_at(commit_log_offset)
    if rec is None:
        raise TransactionError(f"Find prepared transaction message failed (offset {commit_log_offset})")
    m = decode_record(rec, copy=True)
    if m.topic != HALF_TOPIC:
        raise TransactionError(f"the message at offset {commit_log_offset} is not a half message")
    return m


def end_transaction(pipeline, commit_log_offset: int, tran_state_table_offset: int, producer_group: str | None,
                    commit_or_rollback: int, *, wait_flush: bool = True) -> EndResult | None:
    """Commit (8) or roll back (12) a half message; UNKNOWN (0) does nothing (None)."""
    if commit_or_rollback == UNKNOWN:
        return None
    if commit_or_rollback not in (COMMIT, ROLLBACK):
        raise TransactionError(f"commitOrRollback must be 8, 12 or 0, not {commit_or_rollback}")
    m = read_half(pipeline.store, commit_log_offset)
    # EndTransactionProcessor.checkPrepareMessage: same group, same queue offset, same place
    pgroup = m.properties.get(P_PGROUP)
    if producer_group and pgroup and pgroup != producer_group:
        raise TransactionError("The producer group wrong")
    if m.queue_offset != tran_state_table_offset:
        raise TransactionError("The transaction state table offset wrong")
    result = None
    if commit_or_rollback == COMMIT:
        props = dict(m.properties)
        topic = props.pop(P_REAL_TOPIC, None)
        qid = int(props.pop(P_REAL_QID, "0") or 0)
        props.pop(P_TRAN_MSG, None)
        props.pop(P_CHECK_TIMES, None)
        props.pop(P_PREPARED_QOFF, None)
        if not topic:
            raise TransactionError("the half message has no REAL_TOPIC")
        result = pipeline.put_inner(topic, qid, bytes(m.body), props, flag=m.flag,
                                    sysflag=(m.sysflag & ~TX_TYPE_MASK) | TX_COMMIT_TYPE,
                                    born_timestamp=m.born_timestamp, born_host=m.born_host,
                                    reconsume_times=m.reconsume_times, prepared_offset=m.queue_offset,
                                    wait_flush=wait_flush)
    # a re-queued copy (see HalfScanner.requeue) stands for the original: resolve that one
    put_op(pipeline, int(m.properties.get(P_PREPARED_QOFF, m.queue_offset)), wait_flush=wait_flush)
    return EndResult(commit_or_rollback == COMMIT, result, m.queue_offset)


def put_op(pipeline, half_queue_offset: int, *, wait_flush: bool = True):
    """The op record that marks a half message resolved (TransactionalMessageBridge.putOpMessage)."""
    body = str(half_queue_offset).encode()
    return pipeline.store.put(OP_TOPIC, 0, body, encode_properties({TAGS: OP_TAG}).encode(), wait_flush=wait_flush)


@dataclass
class HalfCandidate:
    """A half message the check service should ask its producer about."""
    queue_offset: int
    commit_log_offset: int
    raw: bytes
    producer_group: str | None
    check_times: int
    msg: object


class HalfScanner:
    """Walks RMQ_SYS_TRANS_HALF_TOPIC queue 0 (check service, store owner side)."""

    def __init__(self, store, timeout_ms: int = 6000, max_checks: int = 15):
        self.store = store
        self.timeout_ms = timeout_ms
        self.max_checks = max_checks

    def _progress(self, topic: str) -> int:
        off = self.store.query_offset(CHECK_GROUP, topic, 0)
        return max(off, self.store.min_offset(topic, 0)) if off >= 0 else self.store.min_offset(topic, 0)

    def resolved(self) -> set[int]:
        """Half queue offsets that have an op record (commit or rollback) not yet compacted."""
        done = set()
        off = self.store.min_offset(OP_TOPIC, 0)
        while True:
            res = self.store.get_messages(OP_TOPIC, 0, off, 256, 1 << 20)
            if not res.messages:
                break
            for raw in res.messages:
                try:
                    done.add(int(bytes(decode_record(raw).body)))
                except ValueError:
                    pass
            off = res.next_begin_offset
        return done

    def scan(self, now_ms: int | None = None):
        """Yields (candidate, action) with action "check" or "discard" (checked max times);
        advances the progress offset over everything resolved. The caller re-puts checked
        messages (``requeue``) before asking, as RocketMQ does, so progress can move on."""
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        done = self.resolved()
        off = self._progress(HALF_TOPIC)
        end = self.store.max_offset(HALF_TOPIC, 0)
        while off < end:
            res = self.store.get_messages(HALF_TOPIC, 0, off, 64, 1 << 20)
            if not res.messages:
                break
            for raw, qoff in zip(res.messages, res.queue_offsets):
                m = decode_record(raw, copy=True)
                orig = int(m.properties.get(P_PREPARED_QOFF, qoff))
                if qoff in done or orig in done:
                    off = qoff + 1
                    continue
                immunity = m.properties.get(P_IMMUNITY)
                wait_ms = int(immunity) * 1000 if immunity and immunity.isdigit() else self.timeout_ms
                if now_ms - m.born_timestamp < wait_ms:
                    self._save(off)
                    return  # younger ones follow: stop here until the next round
                times = int(m.properties.get(P_CHECK_TIMES, "0") or 0)
                cand = HalfCandidate(qoff, m.phys_offset, bytes(raw), m.properties.get(P_PGROUP), times, m)
                yield cand, ("discard" if times >= self.max_checks else "check")
                off = qoff + 1
            self._save(off)
        self._save(off)

    def _save(self, off: int) -> None:
        self.store.commit_offset(CHECK_GROUP, HALF_TOPIC, 0, off)

    def requeue(self, pipeline, cand: HalfCandidate):
        """Put the half message again at the end of the half queue with its check count + 1
        (so progress can move past it while its producer answers)."""
        m = cand.msg
        props = dict(m.properties)
        props[P_CHECK_TIMES] = str(cand.check_times + 1)
        props.setdefault(P_PREPARED_QOFF, str(cand.queue_offset))
        return pipeline.store.put(HALF_TOPIC, 0, bytes(m.body), props, flag=m.flag, sysflag=m.sysflag,
                                  born_timestamp=m.born_timestamp, born_host=m.born_host,
                                  reconsume_times=m.reconsume_times)

    def discard(self, pipeline, cand: HalfCandidate) -> None:
        """Checked the maximum number of times: resolved as a rollback (logged by the caller)."""
        put_op(pipeline, int(cand.msg.properties.get(P_PREPARED_QOFF, cand.queue_offset)))


__all__ = ["end_transaction", "put_op", "HalfScanner", "HalfCandidate", "TransactionError", "EndResult",
           "HALF_TOPIC", "OP_TOPIC", "CHECK_GROUP", "COMMIT", "ROLLBACK", "UNKNOWN", "TX_ROLLBACK_TYPE"]
