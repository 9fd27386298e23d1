"""TransactionProducer: RocketMQ's two-phase transactional send.

``send_in_transaction(msg, arg)`` stores a half message (TRAN_MSG=true, PGROUP=group:
invisible to consumers), runs ``listener.execute_local_transaction(msg, arg)`` and ends the
transaction with its answer: COMMIT_MESSAGE makes the message visible in its topic,
ROLLBACK_MESSAGE discards it, UNKNOW leaves it to the broker's check-back, which later calls
``listener.check_local_transaction(msg)`` through CHECK_TRANSACTION_STATE.

The end is END_TRANSACTION (oneway) to the broker; for a broker on this host the producer
resolves it in the store itself (shmq.store.transaction, the same code the broker runs).
"""
from __future__ import annotations

import asyncio
import logging

from shmq.errors import ShmqError
from shmq.message.msgid import decode_offset_msg_id
from shmq.message.names import PGROUP, REAL_QID, REAL_TOPIC, TRAN_MSG
from shmq.protocol import RemotingCommand, RequestCode, request
from shmq.store.transaction import COMMIT, ROLLBACK, UNKNOWN, end_transaction

from .message import LocalTransactionState, Message, SendResult, SendStatus, message_from_view
from .producer import Producer

log = logging.getLogger("shmq.client.transaction")

_CODE = {LocalTransactionState.COMMIT_MESSAGE: COMMIT, LocalTransactionState.ROLLBACK_MESSAGE: ROLLBACK,
         LocalTransactionState.UNKNOW: UNKNOWN}


class TransactionProducer(Producer):
    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, listener=None, **kw):
        super().__init__(group, namesrv, **kw)
        self.listener = listener

    def start(self) -> "TransactionProducer":
        if self.listener is None:
            raise ShmqError("a TransactionProducer needs a listener with execute_local_transaction "
                            "and check_local_transaction")
        super().start()
        try:  # the brokers must know this producer before they can ask it about half messages
            self._learning.result(self.send_timeout)
        except Exception as e:
            log.debug("heartbeat at start: %s", e)
        return self

    def _invoke_sync(self, addr: str, cmd, timeout: float):
        # Half messages go on the client's multiplexed connection, the one that heartbeats:
        # the broker asks its check-back questions on the connection a half message came
        # from, and only the multiplexed one reads requests from the broker.
        inst = self._inst()
        if cmd.__class__ is not RemotingCommand:  # a send's request (client.remote_send)
            cmd = cmd.command()
        return inst.call(inst.invoke(addr, cmd, timeout), timeout + 1)

    def send_in_transaction(self, msg: Message, arg=None) -> SendResult:
        if msg.delay_level:
            msg.delay_level = 0  # as Java: a transactional message is not delayed
        half = Message(msg.topic, msg.body, msg.tags, msg.keys,
                       {**msg.properties, TRAN_MSG: "true", PGROUP: self.group}, 0, msg.flag)
        r = self.send(half)
        if r.status is not SendStatus.SEND_OK:
            state = LocalTransactionState.ROLLBACK_MESSAGE
        else:
            try:
                state = self.listener.execute_local_transaction(msg, arg)
                state = LocalTransactionState(state) if state is not None else LocalTransactionState.UNKNOW
            except Exception:
                log.exception("execute_local_transaction raised: the transaction is left to the check-back")
                state = LocalTransactionState.UNKNOW
            try:
                self._end(r, state)
            except ShmqError as e:  # the check-back will settle it
                log.warning("END_TRANSACTION for %s failed: %s", r.msg_id, e)
        r.local_transaction_state = state
        r.transaction_id = r.msg_id
        return r

    def _end(self, r: SendResult, state: LocalTransactionState) -> None:
        code = _CODE[state]
        _, _, phys = decode_offset_msg_id(r.offset_msg_id)
        link = self.links.get(r.queue.broker_name) if self.links else None
        if link is not None:
            end_transaction(link.pipeline, phys, r.queue_offset, self.group, code)
            return
        inst = self._inst()
        addr = inst.master_addr(r.queue.broker_name)
        if addr is None:
            raise ShmqError(f"no address for broker {r.queue.broker_name}")
        cmd = request(RequestCode.END_TRANSACTION, producerGroup=self.group, tranStateTableOffset=r.queue_offset,
                      commitLogOffset=phys, commitOrRollback=code, fromTransactionCheck=False,
                      msgId=r.offset_msg_id, transactionId=r.msg_id)
        cmd.flag |= 2
        inst.call(inst.invoke_oneway(addr, cmd), self.send_timeout)

    # ---- the broker asks ----------------------------------------------------------------
    async def on_check_transaction(self, conn, cmd) -> None:
        """CHECK_TRANSACTION_STATE: ask the listener (in a thread: it may block) and answer
        END_TRANSACTION on the connection the question came on."""
        try:
            m = message_from_view(memoryview(cmd.body))
            real = m.properties.get(REAL_TOPIC)
            if real:
                m.topic = real
                m.queue_id = int(m.properties.get(REAL_QID, m.queue_id))
        except Exception as e:
            log.warning("cannot decode CHECK_TRANSACTION_STATE body: %s", e)
            return
        loop = asyncio.get_running_loop()
        try:
            state = await loop.run_in_executor(None, self.listener.check_local_transaction, m)
            state = LocalTransactionState(state) if state is not None else LocalTransactionState.UNKNOW
        except Exception:
            log.exception("check_local_transaction raised: answering UNKNOW")
            state = LocalTransactionState.UNKNOW
        ext = cmd.ext_fields
        ans = request(RequestCode.END_TRANSACTION, producerGroup=m.properties.get(PGROUP, self.group),
                      tranStateTableOffset=ext.get("tranStateTableOffset", m.queue_offset),
                      commitLogOffset=ext.get("commitLogOffset", m.commit_log_offset),
                      commitOrRollback=_CODE[state], fromTransactionCheck=True,
                      msgId=ext.get("msgId", m.offset_msg_id), transactionId=ext.get("transactionId", m.msg_id))
        ans.flag |= 2
        try:
            conn.send_oneway(ans)
        except Exception as e:
            log.debug("answer to a transaction check failed: %s", e)
