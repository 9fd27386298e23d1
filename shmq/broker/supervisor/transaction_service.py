"""The transaction check-back service (supervisor; RocketMQ's TransactionalMessageCheckService).

Every transactionCheckInterval it walks the half queue (shmq.store.transaction.HalfScanner):
a half message older than transactionTimeOut with no op record is re-queued with its check
count + 1 and one live producer of its group (PGROUP) is asked, on that producer's own
connection, with CHECK_TRANSACTION_STATE; the producer answers END_TRANSACTION. After
transactionCheckMax checks the message is discarded (resolved as a rollback) and logged.
A restart loses nothing: the half and op queues are in the store and the scan progress is
the consumer offset of group CID_RMQ_SYS_TRANS.
"""
from __future__ import annotations

import logging

from shmq.message.names import REAL_QID, REAL_TOPIC, TRANSACTION_CHECK_TIMES, UNIQ_KEY
from shmq.message.properties import encode_properties
from shmq.message.record import encode_record
from shmq.protocol import RequestCode, request
from shmq.service import ThreadService
from shmq.store.transaction import HalfScanner

log = logging.getLogger("shmq.broker.transaction")


class TransactionCheckService(ThreadService):
    def __init__(self, store, pipeline, ask, *, interval_ms: int = 60_000, timeout_ms: int = 6000,
                 max_checks: int = 15):
        """``ask(producer_group, cmd) -> bool`` sends a oneway command to one live channel of the
        group (False when the group has none)."""
        super().__init__("shmq-tx-check", interval_ms / 1000.0, log=log)
        self.store = store
        self.pipeline = pipeline
        self.ask = ask
        self.scanner = HalfScanner(store, timeout_ms, max_checks)
        self.checked = 0
        self.discarded = 0

    def run_once(self, now_ms: int | None = None) -> int:
        n = 0
        for cand, action in self.scanner.scan(now_ms):
            if action == "discard":
                self.scanner.discard(self.pipeline, cand)
                self.discarded += 1
                log.warning("half message %s of group %s checked %d times without an answer: discarded",
                            cand.msg.properties.get(UNIQ_KEY, cand.commit_log_offset), cand.producer_group,
                            cand.check_times)
                continue
            copy = self.scanner.requeue(self.pipeline, cand)  # a store PutResult
            self._ask(cand, copy)
            n += 1
        self.checked += n
        return n

    def _ask(self, cand, copy) -> None:
        m = cand.msg
        props = dict(m.properties)
        topic = props.get(REAL_TOPIC, m.topic)
        qid = int(props.get(REAL_QID, m.queue_id) or 0)
        props[TRANSACTION_CHECK_TIMES] = str(cand.check_times + 1)
        body = encode_record(topic=topic, body=bytes(m.body), properties=encode_properties(props), queue_id=qid,
                             flag=m.flag, queue_offset=copy.queue_offset, phys_offset=copy.phys_offset,
                             sysflag=m.sysflag, born_timestamp=m.born_timestamp, born_host=m.born_host,
                             store_timestamp=copy.store_timestamp, store_host=m.store_host,
                             reconsume_times=m.reconsume_times)
        uniq = props.get(UNIQ_KEY, copy.msg_id)
        cmd = request(RequestCode.CHECK_TRANSACTION_STATE, body=body, tranStateTableOffset=copy.queue_offset,
                      commitLogOffset=copy.phys_offset, msgId=uniq, transactionId=uniq, offsetMsgId=copy.msg_id)
        cmd.flag |= 2
        if not cand.producer_group or not self.ask(cand.producer_group, cmd):
            log.info("no live producer of group %s to check half message %s", cand.producer_group, uniq)
