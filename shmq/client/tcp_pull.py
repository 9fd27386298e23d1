"""One assigned queue's long-polling pull over TCP, answered in callbacks.

RocketMQ's ``PullMessageService`` + ``PullAPIWrapper``: a PULL_MESSAGE with the suspend flag
is held by the broker until the queue grows (or ``suspendTimeoutMillis`` passes), and the
consumer sends the next one as soon as an answer arrives. A caught-up consumer does this once
per message, so the cycle's cost is the consumer's cost per message.

The steady cycle runs in the connection's read callback, with no task, future or timer per
pull: the answer goes to :meth:`TcpPull.set_result` (a waiter of
``Connection.start_request``), which sends the next PULL first (it is written in the same
turn of the loop, before any consume thread is woken) and then hands the messages to the
consumer (``ConsumerCore._deliver``). The steady answer (SUCCESS, plain records of the queue's
own topic) does not even become a RemotingCommand: the connection's fast hook reads it in C from
the read buffer (native/pull_answer.c) and calls :meth:`TcpPull._pulled` with the two offsets
the consumer uses and the decoded messages; every other answer takes ``set_result``. The steady
case of those (messages for a queue with no tag filter, room under the pull threshold, the route
unchanged: native/pull_steady.c says which) does not reach ``_pulled`` either: the same steps, in
its order, are done in C for a chain ``_arm`` armed. A lost
answer is failed by one watchdog timer per queue (``expire``), not a timer per request.

Anything off the steady path (no connection yet, a different broker suggested, flow control,
an error answer, a timeout, a dropped queue) ends the chain: the queue's task
(``ConsumerCore._pull_tcp``) awaits :meth:`TcpPull.run`'s result, sleeps what it says and
starts a new chain. Cancelling that task stops the chain (an answer still in flight is
ignored). Ordering holds: one pull in flight per queue, and the next offset is the answer's
nextBeginOffset, as before.
"""
from __future__ import annotations

import asyncio
import logging

from shmq.errors import ShmqError
from shmq.protocol import RemotingCommand, RequestCode, ResponseCode, request
from shmq.protocol.command import header_template

from shmq.message.names import RETRY_PREFIX
from shmq.native import _answer

from .message import messages_from_records

log = logging.getLogger("shmq.client.consumer")

PULL_SYS_COMMIT, PULL_SYS_SUSPEND, PULL_SYS_SUBSCRIPTION = 1, 2, 4
_FLAGS = PULL_SYS_SUSPEND | PULL_SYS_SUBSCRIPTION  # every pull's sysFlag; with the commit bit:
_FLAGS_COMMIT = _FLAGS | PULL_SYS_COMMIT
_NO_FILTER = (None, None)  # ConsumerCore._filters' entry of a topic without a tag filter
PULL_DELAY_ON_ERROR_S = 3.0
ANSWER_MARGIN_S = 15.0  # a pull unanswered this long past its suspend timeout is failed
FLOW_CONTROL_DELAY_S = 0.05


class PullFrame:
    """The whole PULL_MESSAGE frame of one queue's pulls, made per pull by putting the three
    fields that change (queueOffset, sysFlag, commitOffset) and the opaque into slots of a
    template (``command.header_template``, over the queue's fields), so the layout is still
    defined once and the frame is byte-identical to encoding a RemotingCommand
    (tests/unit/test_tcp_pull.py). The template is kept as its five literal pieces around the
    four slots and ``slots`` (which value each slot takes), written by one C call
    (native/pull_answer.c ``pull_frame``: a %-format, its tuple and the join were ~4,000
    instructions per pull). ``of`` answers None when a stand-in does not occur exactly once (a
    group or topic holding one): the caller encodes generically."""

    __slots__ = ("pieces", "slots")

    def __init__(self, pieces: tuple[bytes, ...], slots: tuple[int, ...]):
        self.pieces, self.slots = pieces, slots

    @classmethod
    def of(cls, fixed: dict[str, str]) -> "PullFrame | None":
        ext = dict(fixed)
        ext["queueOffset"], ext["sysFlag"], ext["commitOffset"] = _MARK_OFFSET, _MARK_FLAGS, _MARK_COMMIT
        made = header_template(RequestCode.PULL_MESSAGE, ext, _SLOTS)
        if made is None:
            return None
        return cls(_pieces(made[0]), made[1])

    def frame(self, offset: int, sysflag: int, commit: int, opaque: int) -> bytes:
        return _pull_frame(self.pieces, self.slots, (offset, sysflag, commit), opaque)


def _pieces(template: bytes) -> tuple[bytes, ...]:
    """A %-template's literal text around its ``%d`` slots, each ``%%`` read as ``%``."""
    out, cur, i = [], bytearray(), 0
    while i < len(template):
        two = template[i:i + 2]
        if two == b"%%":
            cur += b"%"
            i += 2
        elif two == b"%d":
            out.append(bytes(cur))
            cur = bytearray()
            i += 2
        else:
            cur.append(template[i])
            i += 1
    out.append(bytes(cur))
    return tuple(out)


_MARK_OFFSET, _MARK_FLAGS, _MARK_COMMIT = "9100000000000000001", "9100000000000000002", "9100000000000000003"
_SLOTS = [(b'"%s"' % m.encode(), b'"%d"') for m in (_MARK_OFFSET, _MARK_FLAGS, _MARK_COMMIT)]
_pull_frame = _answer.pull_frame


class TcpPull:
    """The pull chain of one ProcessQueue (see the module docstring)."""

    # slots: native/pull_answer.c reads _opaque, _fast and _steady (bound at import, below)
    __slots__ = ("core", "pq", "fixed", "template", "_next", "timeout", "_end", "_conn", "_addr", "_hook", "_opaque",
                 "_seen", "_watch", "_loop", "_fast", "_plain", "_steady")

    def __init__(self, core, pq):
        self.core = core
        self.pq = pq
        mq = pq.mq
        # the answers native/pull_answer.c may read: a queue whose records show its own topic
        # (a retry queue's show their original one: messages_from_records' Python decode)
        self._fast = None if mq.topic.startswith(RETRY_PREFIX) else (mq.topic, mq.broker_name)
        sub = core.subscriptions.get(mq.topic)
        # the request's fields that stay the same for this queue, as the strings they are sent as
        self.fixed = request(RequestCode.PULL_MESSAGE, consumerGroup=core.group, topic=mq.topic,
                             queueId=mq.queue_id, maxMsgNums=core.pull_batch_size,
                             suspendTimeoutMillis=core.suspend_timeout_ms, subscription=sub.subString,
                             subVersion=sub.subVersion, expressionType=sub.expressionType).ext_fields
        self.template = PullFrame.of(self.fixed)
        self._next = (0, 0, 0)  # this pull's queueOffset, sysFlag, commitOffset (for _frame)
        self.timeout = core.suspend_timeout_ms / 1000 + ANSWER_MARGIN_S
        self._end: asyncio.Future | None = None  # the chain's result: the delay before the next one
        self._conn = None
        self._addr: str | None = None
        self._hook = None
        self._opaque = 0                          # the request in flight (0: none)
        self._seen = (0, 0.0)                     # the watchdog's: an opaque in flight, when it first saw it
        self._plain = False                       # no ACL hook and a template: the frame from the template
        self._steady = None                       # the chain's steady case in C (_arm), or None
        self._watch: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    # ---- the task's side --------------------------------------------------------------------
    async def run(self) -> float:
        """Run one chain; returns the delay before the next (0: start again at once)."""
        core, pq = self.core, self.pq
        if pq.count >= core.threshold or not core._may_pull(pq):
            return FLOW_CONTROL_DELAY_S
        addr, _slave = core.instance.read_addr(pq.mq.broker_name, core._pull_from.get(pq.mq, 0))
        try:
            if addr is None:
                raise ShmqError(f"no address for {pq.mq.broker_name}")
            client, conn = await core.instance.connect(addr)
        except ShmqError as e:
            log.debug("pull %s failed: %s", pq.mq, e)
            return PULL_DELAY_ON_ERROR_S
        loop = self._loop = asyncio.get_running_loop()
        self._conn, self._addr, self._hook = conn, addr, client.rpc_hook
        self._plain = self._hook is None and self.template is not None
        self._steady = self._arm(conn, addr)
        self._end = loop.create_future()
        self._watch = loop.call_later(self.timeout / 4, self._watchdog)
        try:
            if self._issue():
                return await self._end
            return self._end.result()
        finally:
            self._stop()

    def _arm(self, conn, addr: str) -> tuple | None:
        """What native/pull_steady.c needs to take this chain's steady answers (a SUCCESS with
        messages, handled as ``_pulled`` handles it, with no Python frame): the consumer, the
        ProcessQueue, its queue, the chain's connection and address, the client instance (its
        route, read as ``read_addr`` reads it), a PullBuild of the queue's template, the consume
        pool's hand-over (``_steady_pool``; None: the consumer's ``_deliver``) and the pull's
        sysFlag without and with a commit (the bits are this module's). None (every
        answer ``_pulled``'s) without a plain template (an ACL hook signs each pull) or for an
        orderly consumer's gated queues (``_may_pull`` per pull, its broker lock). Fixed for the
        chain: what can change while it runs (a drop, a filter, the threshold, the route, the
        connection) is read by the C per answer, which leaves any other case to ``_pulled``.
        Then the containers that C reads per answer, held here rather than looked up on their
        owners each time (~190 instructions an attribute read, seven of them an answer, and two
        method look-ups): the consumer's tag filters and suggested brokers, the instance's route
        and unreachable marks, the ProcessQueue's lock (its bound acquire and release) and
        spans, the offset table. Each is made once in its owner's ``__init__`` and only changed
        in place (tests/unit/test_steady_fixed.py fails on a rebinding), so the chain sees every
        change. A stand-in without them (a test's fake): None, every answer ``_pulled``'s, as the
        C read would find."""
        core = self.core
        if not self._plain or core._gated:
            return None
        t, pq, inst = self.template, self.pq, core.instance
        # the sysFlag of a pull without and with the commit bit (_issue's rule: the commit bit for
        # a clustering consumer asking a master; the model is fixed for the consumer's life)
        commit_flags = _FLAGS_COMMIT if core.model == "CLUSTERING" else _FLAGS
        try:
            fixed = (core._filters, core._pull_from, inst._unreachable, inst.broker_addrs, pq.lock.acquire,
                     pq.lock.release, pq._spans, core.offsets.table)
        except AttributeError:
            return None
        return (core, pq, pq.mq, conn, addr, inst, PullBuild(t.pieces, t.slots), core._steady_pool(),
                _FLAGS, commit_flags) + fixed

    def _steady_failed(self, e: BaseException) -> bool:
        """pull_steady.c's error, raised after it changed something: as ``_issue``'s ShmqError
        (the chain ends; True: the messages are still handed over) or ``_pulled``'s handler."""
        if isinstance(e, ShmqError):
            log.debug("pull %s failed: %s", self.pq.mq, e)
            self._finish(PULL_DELAY_ON_ERROR_S)
            return True
        log.error("pull %s: handling the answer failed", self.pq.mq, exc_info=e)
        self._finish(PULL_DELAY_ON_ERROR_S)
        return False

    def _stop(self) -> None:
        self._steady = None
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        self._opaque = 0
        self._conn = None
        end, self._end = self._end, None
        if end is not None and not end.done():
            end.cancel()

    def _finish(self, delay: float) -> None:
        """Leave the steady path: the task sleeps ``delay`` and starts a new chain."""
        self._opaque = 0
        self._steady = None
        if self._end is not None and not self._end.done():
            self._end.set_result(delay)

    def _watchdog(self) -> None:
        """A pull unanswered for ``timeout`` is failed (RemotingTimeout through set_exception).
        The pull's start time is not read per pull (a clock read per message): the watchdog
        notes the opaque in flight and when it first saw it, and fails it once that is
        ``timeout`` ago, so between ``timeout`` and ``1.5 * timeout`` after it was sent."""
        conn = self._conn
        if conn is None:
            return
        opaque, now = self._opaque, self._loop.time()
        if opaque and opaque == self._seen[0]:
            if now - self._seen[1] >= self.timeout:
                conn.expire([opaque], RequestCode.PULL_MESSAGE, self.timeout)
        else:
            self._seen = (opaque, now)
        if self._conn is not None:
            self._watch = self._loop.call_later(self.timeout / 4, self._watchdog)

    # ---- the steady cycle -------------------------------------------------------------------
    def _issue(self) -> bool:
        """Send the next PULL on the chain's connection; False (chain finished) when it cannot."""
        core, pq = self.core, self.pq
        if not core._running or pq.dropped:
            self._finish(0.0)
            return False
        if pq.count >= core.threshold or (core._gated and not core._may_pull(pq)):
            self._finish(FLOW_CONTROL_DELAY_S)
            return False
        mq = pq.mq
        addr, slave = core.instance.read_addr(mq.broker_name, core._pull_from.get(mq, 0))
        conn = self._conn
        if addr != self._addr or conn is None or conn.closed:
            self._finish(0.0)  # another broker suggested, or the connection went: a new chain
            return False
        # a slave is never asked to commit (PullAPIWrapper)
        commit = core.offsets.table.get(mq, -1)
        if commit > 0:
            flags = _FLAGS_COMMIT if core.model == "CLUSTERING" and not slave else _FLAGS
        else:  # (no max(): a builtin call parses its arguments, ~700 instructions per pull)
            flags, commit = _FLAGS, 0
        try:
            if self._plain:
                self._next = (pq.next_offset, flags, commit)
                self._opaque = conn.start_frame(self._frame, self)
            else:  # the ACL hook signs the fields: the generic encoding
                ext = dict(self.fixed)
                ext["queueOffset"], ext["sysFlag"], ext["commitOffset"] = \
                    str(pq.next_offset), str(flags), str(commit)
                cmd = RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext)
                if self._hook is not None:
                    self._hook(cmd)
                self._opaque = conn.start_request(cmd, self)
        except ShmqError as e:
            log.debug("pull %s failed: %s", mq, e)
            self._finish(PULL_DELAY_ON_ERROR_S)
            return False
        return True

    def _frame(self, opaque: int) -> bytes:
        # PullFrame.frame's body, inline (a call less per pull)
        t = self.template
        return _pull_frame(t.pieces, t.slots, self._next, opaque)

    # Connection.start_request's waiter: done / set_result / set_exception, on the loop
    def done(self) -> bool:
        return self._opaque == 0

    def set_exception(self, e: BaseException) -> None:
        if self._opaque:
            log.debug("pull %s failed: %s", self.pq.mq, e)
            self._finish(PULL_DELAY_ON_ERROR_S)

    def set_result(self, resp: RemotingCommand) -> None:
        if resp.opaque != self._opaque or not self._opaque:
            return  # the answer to a pull of a chain stopped while it was in flight
        self._opaque = 0
        try:
            self._answered(resp)
        except Exception:  # noqa: BLE001 - a bad answer ends this chain, never the connection
            log.exception("pull %s: handling the answer failed", self.pq.mq)
            self._finish(PULL_DELAY_ON_ERROR_S)

    def _pulled(self, suggest: int, nxt: int, msgs: list) -> None:
        """A SUCCESS answer: its messages (decoded, not filtered yet) go to the ProcessQueue and
        the consumer after the next pull is sent. Called by native/pull_answer.c (the
        connection's fast hook), which checked that it answers the pull in flight, popped this
        waiter, read the two offsets and decoded the records; and by ``_answered`` (set_result)
        for a SUCCESS answer the Python decoder read. Once per message of a caught-up consumer,
        so one frame for all of it (no _found / _accept calls)."""
        self._opaque = 0
        core, pq = self.core, self.pq
        try:
            if pq.dropped:
                self._finish(0.0)
                return
            mq = pq.mq
            core._pull_from[mq] = suggest
            if core._filters.get(mq.topic, _NO_FILTER)[0] is not None:  # a tag filter: _accept's
                msgs = core._accept(mq.topic, msgs)
            pq.next_offset = nxt
            if msgs:
                pq.put(msgs)
                self._issue()  # the next pull goes out before a consume thread is woken
                core._deliver(pq, msgs)
                return
            if nxt - 1 > pq.max_seen:
                pq.max_seen = nxt - 1
            if not pq.count:
                core.commit(pq, nxt)
            self._issue()
        except Exception:  # noqa: BLE001 - as set_result: this chain ends, never the connection
            log.exception("pull %s: handling the answer failed", pq.mq)
            self._finish(PULL_DELAY_ON_ERROR_S)

    def _answered(self, resp: RemotingCommand) -> None:
        core, pq = self.core, self.pq
        if pq.dropped:
            self._finish(0.0)
            return
        mq = pq.mq
        ext = resp.ext_fields
        suggest = _int(ext.get("suggestWhichBrokerId"))
        nxt = _int(ext.get("nextBeginOffset"), pq.next_offset)
        code = resp.code
        if code == ResponseCode.SUCCESS:
            self._pulled(suggest, nxt, messages_from_records(resp.body, mq.broker_name, mq.topic))
            return
        core._pull_from[mq] = suggest
        if code in (ResponseCode.PULL_NOT_FOUND, ResponseCode.PULL_RETRY_IMMEDIATELY):
            pq.next_offset = nxt
            if code == ResponseCode.PULL_RETRY_IMMEDIATELY and not pq.count:
                pq.max_seen = max(pq.max_seen, nxt - 1)
                core.commit(pq, nxt)
        elif code == ResponseCode.PULL_OFFSET_MOVED:
            log.warning("%s: offset %d of %s moved to %d", core.group, pq.next_offset, mq, nxt)
            pq.next_offset = nxt
            pq.max_seen = nxt - 1
            core.offsets.update(mq, nxt, increase_only=False)
        else:
            log.debug("pull %s answered %d %s", mq, code, resp.remark)
            self._finish(PULL_DELAY_ON_ERROR_S)
            return
        self._issue()


def _int(text, default: int = 0) -> int:
    try:
        return int(text)
    except (TypeError, ValueError):
        return default


# its SUCCESS answers are read in C (native/pull_answer.c), the steady ones handled there too
PullBuild = _answer.bind_pull(TcpPull)
