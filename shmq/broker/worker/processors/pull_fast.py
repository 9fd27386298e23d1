"""The worker's C path for the common PULL_MESSAGE: served from the read buffer in the same C call
as the plain sends (``native/remoting_pull.c``, over send_fast.py's ``RemotingSends``), before
Python decodes it; a frame it does not take is served by pull.py in its place on the wire.

What it takes is what pull.py answers from an unfiltered read: a JSON header with every field
as digits, not oneway, from a (consumerGroup, topic, queueId) pull.py served an unfiltered pull
of in the handler's own call (``learn``: the broker's and topic's read permission and the queue
id passed under the TopicConfig still in the worker's table), with the request's own subscription
("*" or empty, TAG) or the group's cached one as pull.py found it (unchanged since: the worker's
``sub_epoch``; not expired; not older than the request's subVersion). The C call stores the
commit offset when the flag asks (the word ``MessageStore.commit_offset`` writes, learnt from
pull.py's own commit of that queue), then answers the records the read finds (FOUND, from
pull.py's own header template) or, caught up with the suspend flag, hands the pull back held:
``hold`` parks it in pull_hold.py beside pull.py's holds, counted in the same per-connection
``max_inflight``, and its answer is one C call (``answer``; whatever that read does not find,
pull.py's ``answer_held`` answers). Every guarantee of pull_hold.py holds for these holds as for
pull.py's: they are its holds.

Not made (every pull through pull.py) when the send path is not (ACL, PROM metrics,
``SHMQ_SEND_FAST=0``) or with ``SHMQ_PULL_FAST=0`` (worker/main.py: the A/B switch). The
broker's read permission and slaveReadEnable are looked at per read (the room that
``FastSends.__call__`` gives the C call): without the one or with the other every pull is pull.py's.
"""
from __future__ import annotations

from shmq.protocol import RequestCode
from shmq.protocol.headers import PullMessageRequestHeader

from ..context import WorkerContext
from .pull import (_HELD, FLAG_COMMIT_OFFSET, FLAG_SUBSCRIPTION, FLAG_SUSPEND, MAX_TRANSFER_BYTES, MAX_TRANSFER_COUNT,
                   Processor, _sub_version)

#: the PULL_MESSAGE fields the C path reads, in remoting_pull.c's P_* order
_FIELDS = ("consumerGroup", "topic", "queueId", "queueOffset", "maxMsgNums", "sysFlag", "commitOffset",
           "suspendTimeoutMillis", "subVersion", "subscription", "expressionType")
assert set(_FIELDS) == {f for f, _, _ in PullMessageRequestHeader._fields()}


class FastPulls:
    """The pull half of a worker's ``Connection.fast`` (send_fast.FastSends calls it)."""

    def __init__(self, w: WorkerContext, proc: Processor, sends, no_mix: bool):
        """``sends``: the RemotingSends whose serve call takes the pulls too; ``no_mix``: under
        SYNC_FLUSH one run of frames is sends or pulls, never both (a pull's answer must not
        wait for the sends' flush, nor a send's leave before it)."""
        self.w, self.proc, self.c = w, proc, sends
        self.cfg = w.cfg
        sends.pulls(RequestCode.PULL_MESSAGE, RequestCode.LITE_PULL_MESSAGE, _FIELDS, proc.found_pieces(),
                    (FLAG_COMMIT_OFFSET, FLAG_SUSPEND, FLAG_SUBSCRIPTION), MAX_TRANSFER_COUNT, MAX_TRANSFER_BYTES,
                    no_mix)
        self._learnt: dict[tuple[str, str, int], tuple] = {}
        self._words: dict[tuple[str, str, int], int] = {}  # commit-offset words learnt
        proc.fast = self

    def learn(self, h: PullMessageRequestHeader, tc, sub, committed: bool) -> None:
        """pull.py served this unfiltered pull in the handler's call under ``tc``, with the
        request's subscription (``sub`` None) or the cached ``sub``; ``committed``: it stored
        the commit offset (the slot is there: its word is learnt)."""
        key = (h.consumerGroup, h.topic, h.queueId)
        word = self._words.get(key, 0)
        if committed and not word:
            word = self._words[key] = self.w.store.commit_offset_word(*key)
        cached = None
        if sub is not None:
            cached = (_sub_version(sub), self.w.sub_epoch, self.w.cached_subscription_until(h.consumerGroup, h.topic))
        reader = self.proc.reader(h.topic, h.queueId)
        state = (tc, word, cached, reader)
        if reader is None or self._learnt.get(key) == state:
            return
        info = (h.topic, h.queueId, reader.st)
        if not self.c.learn_pull(h.consumerGroup, h.topic, h.queueId, tc, info, word, cached):
            # full (deleted topics' queues stay learnt): start again; the live ones are learnt
            # again by their next pull through pull.py
            self.c.clear_pulls()
            self._learnt.clear()
            self.c.learn_pull(h.consumerGroup, h.topic, h.queueId, tc, info, word, cached)
        self._learnt[key] = state

    def hold(self, conn, held: list) -> None:
        """Park the pulls the C call held (pull.py ``_held``'s direct case): each record is
        (the learnt (topic, queue id, reader state), offset, suspendTimeoutMillis, maxMsgNums,
        opaque); pull_hold.py's ``hold_fast`` makes the holds, ``_answer`` answers each."""
        ctx = conn.context
        ctx[_HELD] = ctx.get(_HELD, 0) + len(held)
        self.w.holds.hold_fast(conn, held, self.cfg.longPollingMaxMillis, self._answer)

    def _answer(self, h, _grew: bool) -> None:
        """A held pull's answer (once, on the loop): one C call over its record (``h.info``), the
        read and the frame; what that read does not find, pull.py's ``answer_held`` answers."""
        conn = h.owner
        conn.context[_HELD] -= 1
        if not conn.closed:
            r = self.c.answer(h.info)
            if r is None:  # not found by the C read: pull.py reads and answers
                rec = h.info
                self.proc.answer_held(conn, h.topic, h.qid, h.offset, rec[3], rec[4])
                return
            self.w.stats["get"] += r[1]
            conn.write_frame(r[0])
