"""The worker's C path for the common TCP send: plain SEND_MESSAGE_V2 frames served straight from
the read buffer by ``native/remoting_send.c`` (``shmq.native.RemotingSends``), before Python
decodes them. The transport hands it each read (``Connection.fast``); it serves the leading run
of frames it takes and stops at the first one it does not, which the normal path then serves
(send.py and every other processor), so frames are served in their order on the wire. The
common PULL_MESSAGE is taken in the same call (pull_fast.py, ``take_pulls``): a read holding
both a consumer's pull and a producer's send (one client instance's connection) is one call.

What it takes is what send.py's ``_send_checked`` would store with a PLAIN put (or, for a
SEND_BATCH_MESSAGE, ``_put_batch``'s one batch append: remoting_batch.c) and answer SUCCESS at
once: code 310 (not a batch) or 320 with a JSON header, the fields ``_fast_v2`` reads, no
transaction type, no DELAY / TRAN_MSG / TIMER_ property, to a queue the Python path has already
served under the TopicConfig still in the worker's table (``learn``: the topic-name, system-topic,
queue-id and order-topic checks passed for that config; a table change makes the C path hand
the frame back, and the Python path learns the new config), or to another queue of such a topic
whose id is in the topic's range (learnt by C at its first send, its slot made there: the other
checks are the topic's; without it every new queue's first send took the Python path, ~10x a
C send's CPU, milliseconds on a loaded machine: issue 16, firstq13). A topic of the worker's
table whose sends pass the topic's checks (``topics_changed``: a sendable name, not an order
topic, not %RETRY%) is learnt so when the table is pushed, before any send to it, so a new
topic's very first send is C's too (issue 16, topicfirst15); a batch also needs a batch-level
properties text the Python path has stored a batch with (``learn_batch``). Any other frame, and any non-zero
status of the append (a file to map, a full disk, a too-large body: nothing was stored), is the
Python path's, which answers, maps or refuses as it always did. What a send changes besides the
store is done here for the frames C served: the worker's put counter and the held pulls' wake.

Under SYNC_FLUSH the answers of a served run wait for the group commit like the Python path's:
the run's answer bytes are queued in the send processor's Confirmer at the commit position
after its last append (``serve``'s ``end``), written once the flushed position covers it, and
rewritten to FLUSH_DISK_TIMEOUT (code 10, the same ids) if it is not flushed in time or the
flush failed. Until the flush the connection counts the run as one deferred answer (its
back-pressure). Not made at all (``Processor.fast_path`` None) under SYNC_MASTER (a send is
refused before its put when no slave is connected: the Python path's), with ACL on, or with
the PROM metrics (they count every request by code): those servers serve every frame the
normal way. ``SHMQ_SEND_FAST=0`` in the broker's
environment turns it off too (worker/main.py: the A/B switch of the send benchmarks).
"""
from __future__ import annotations

import os
import socket
import struct

from shmq.broker.shared.topics import queue_count
from shmq.errors import FlushFailed, InvalidTopic
from shmq.message.layout import TX_TYPE_MASK
from shmq.message.msgid import host_prefix
from shmq.message.names import PERM_READ, RETRY_PREFIX
from shmq.native import (BATCH_PHYS_ADDRESS, PUT_ADDRESS, PUT_BATCH_ADDRESS, QUEUE_CREATE_ADDRESS, RemotingSends, ffi,
                         lib)
from shmq.protocol import (FLAG_ONEWAY, FLAG_RESPONSE, RemotingCommand, RequestCode, ResponseCode, decode_command,
                           encode_command)
from shmq.protocol.send_answer import answer_pieces, send_ext  # noqa: F401 - send_ext: send.py, admin_clients.py
from shmq.protocol.headers import SEND_V2_LETTERS
from shmq.store.validate import check_sendable_topic

from ..context import WorkerContext, born_host
from .pull import _HELD

#: the SEND_MESSAGE_V2 fields the C path reads, in remoting_send.c's K_* order
_FIELDS = ("producerGroup", "topic", "defaultTopic", "defaultTopicQueueNums", "queueId", "sysFlag", "bornTimestamp",
           "flag", "properties", "reconsumeTimes", "maxReconsumeTimes", "batch")
_LETTER = {name: letter for letter, name in SEND_V2_LETTERS.items()}
#: at most this many topics are learnt ahead of their first send (``topics_changed``): their entries
#: share the C table (16,384 usable) with the queues actually sent to; a topic beyond it is learnt
#: by its first send through the Python path, as before
EAGER_TOPICS = 4096

def born_ints(conn) -> tuple[int, int]:
    """The connection's peer as the record's bornHost fields (IPv4 as an int, port), cached."""
    bi = conn.context.get("born_int")
    if bi is None:
        ip, port = born_host(conn)
        bi = conn.context["born_int"] = (struct.unpack(">I", socket.inet_aton(ip))[0], port)
    return bi


class FastSends:
    """``Connection.fast`` for a worker's connections (see the module docstring)."""

    def __init__(self, w: WorkerContext, confirmer=None):
        self.w = w
        self._confirmer = confirmer  # SYNC_FLUSH: () -> the send processor's Confirmer
        store = w.store
        self.c = RemotingSends(PUT_ADDRESS, int(ffi.cast("uintptr_t", store.appender.w)), RequestCode.SEND_MESSAGE_V2,
                               tuple(_LETTER[f] for f in _FIELDS), answer_pieces(), w.pipeline.cluster_pair,
                               host_prefix(store.store_host), (FLAG_RESPONSE, FLAG_ONEWAY, TX_TYPE_MASK))
        # SEND_BATCH_MESSAGE too (remoting_batch.c): a body over max_message_size is Python's
        self.c.batches(PUT_BATCH_ADDRESS, BATCH_PHYS_ADDRESS, RequestCode.SEND_BATCH_MESSAGE,
                       store.cfg.max_message_size)
        # a learnt topic's other queues are learnt by their first send, in C (remoting_send.c
        # sibling): not a trip through send.py for every new queue (issue 16, firstq13)
        self.c.queues(QUEUE_CREATE_ADDRESS)
        self._learnt: dict[tuple[str, int], object] = {}
        self._ahead: dict[str, object] = {}  # topics learnt by topics_changed, with their configs
        self._batch_texts: set[str] = set()
        self.pulls = None  # pull_fast.FastPulls once take_pulls is called
        # the appends of one read wake the other workers' held pulls once, after the last of them
        # (native/core_util.c shmq_pull_peers_defer), not at the first; SHMQ_PEER_WAKE_RUN=0: at
        # each append, as before (the A/B switch)
        self._run_ctl = store.cb.ctl if os.environ.get("SHMQ_PEER_WAKE_RUN") != "0" else None
        self.topics_changed(w.topics.table)

    def topics_changed(self, table: dict) -> None:
        """The worker's topic table was replaced (TOPICS_CHANGED, or the one it started with):
        each topic whose sends pass send.py's topic checks under its config (a sendable name,
        not a system topic, not %RETRY% (the pipeline's), not an order topic) is learnt by C
        with its queue count, so the first send to each of its queues, the topic's very first
        included, is served by C (native/remoting_send.c ``sibling``: the queue id's range
        checked, the slot made) and not by a trip through send.py, ~250-400 µs of the worker's
        CPU (issue 16). Whatever C serves it serves only while the table holds this very config
        object (``tc is``): a topic deleted, recreated or changed after is the Python path's,
        which answers (TOPIC_NOT_EXIST, auto-create, ...) and learns again as before."""
        ahead = self._ahead
        for name in [n for n in ahead if n not in table]:
            del ahead[name]
        for name, tc in table.items():
            if ahead.get(name) is tc:
                continue
            if len(ahead) >= EAGER_TOPICS:
                break
            if tc.order or name.startswith(RETRY_PREFIX) or queue_count(tc) <= 0:
                continue
            try:
                check_sendable_topic(name)
            except InvalidTopic:
                continue
            if not self.c.learn(name, -1, tc, 0, queue_count(tc)):
                break  # full: the first sends learn them, as before
            ahead[name] = tc

    def take_pulls(self, proc) -> None:
        """Serve the common PULL_MESSAGE too, in the same call (pull_fast.py); ``proc``: pull.py's Processor."""
        from .pull_fast import FastPulls
        self.pulls = FastPulls(self.w, proc, self.c, self._confirmer is not None)

    def learn(self, topic: str, qid: int, tc, writer) -> None:
        """The Python path stored a plain SEND_MESSAGE_V2 to ``topic``:``qid`` under ``tc``
        through ``writer`` (its FastWriter) after every check passed: C may serve the next ones."""
        key = (topic, qid)
        if self._learnt.get(key) is tc:
            return
        slot = writer.plain_call().slot
        # the topic too: its queues 0 .. nq-1 pass send.py's checks under tc as this one did (the
        # range is the one check that is the queue's), so C serves their first sends itself
        nq = queue_count(tc)
        if not self.c.learn(topic, qid, tc, slot, nq):
            # full (deleted topics' queues stay learnt): start again; the live queues are learnt
            # again by their next send through the Python path
            self.c.clear()
            self._learnt.clear()
            self._ahead.clear()  # (learnt again at the next table push)
            self.c.learn(topic, qid, tc, slot, nq)
        self._learnt[key] = tc

    def learn_batch(self, topic: str, qid: int, tc, writer, text: str) -> None:
        """The Python path stored a SEND_BATCH_MESSAGE to ``topic``:``qid`` under ``tc`` whose
        batch-level properties text was ``text`` (so PutPipeline.batch_properties took it): C may
        serve the next batches with that text, storing the same extra properties with each entry.
        Texts beyond the C table's few stay the Python path's."""
        self.learn(topic, qid, tc, writer)
        if text not in self._batch_texts and self.c.learn_batch(text, self.w.pipeline.batch_properties(text)):
            self._batch_texts.add(text)

    def __call__(self, conn, data: bytes, pos: int):
        ctx, limits = conn.context, conn.limits
        bi = ctx.get("born_int")  # (born_ints' cached answer, without its call)
        ip, port = bi if bi is not None else born_ints(conn)
        pulls = self.pulls
        # the held pulls conn may still park directly (pull.py _held's max_inflight), or -1:
        # every pull of this read is pull.py's (no FastPulls, no read permission, or
        # slaveReadEnable, whose answers may suggest the slave); here, not a FastPulls method: a
        # call per read was a tenth of this method
        room = -1
        if pulls is not None:
            cfg = pulls.cfg
            if cfg.brokerPermission & PERM_READ and not cfg.slaveReadEnable:
                room = limits.max_inflight - ctx.get(_HELD, 0)
                if room < 0:
                    room = 0
        w = self.w
        run = self._run_ctl
        if run is not None:
            _defer_peer_wakes(run, 1)
        try:
            pos, answers, stored, stop, end, got, held = self.c.serve(
                data, pos, w.topics.table, ip, port, limits.max_frame_size, room, w.sub_epoch)
        finally:
            if run is not None:
                _defer_peer_wakes(run, 0)  # (the wake the run's appends owe, if any, now)
        if got:
            w.stats["get"] += got
        if stored:
            w.stats["put"] += stored
            holds = w.holds
            if answers is not None and self._confirmer is not None:
                # SYNC_FLUSH: none of these answers leaves before every byte below end is durable
                self._confirmer().add(end, _answer_run, (conn.defer(None), answers))
                answers = None
                holds.appended()
            elif holds.appended_in_read(conn, answers):
                answers = None  # written, then the held pulls they satisfied answered
        if held is not None:
            if answers is not None:  # what this run answered leaves before a held pull's answer
                conn.write_frame(answers)
                answers = None
            pulls.hold(conn, held)
        return pos, answers, stop


_defer_peer_wakes = lib.shmq_pull_peers_defer


def _answer_run(arg, exc) -> None:
    """The Confirmer's answer to a served run: its answers as built, or each rewritten to
    FLUSH_DISK_TIMEOUT with its ids (as send.py's _answer_confirmed answers one send)."""
    later, answers = arg
    conn = later.conn
    if conn is not None:
        conn.write_frame(answers if exc is None else _flush_failed(answers, exc))
    later.answer(None)  # no further frame: this only ends the run's place among the in-flight


def _flush_failed(answers: bytes, exc) -> bytes:
    remark = str(exc) if isinstance(exc, FlushFailed) else "flush disk timeout"
    out, pos = [], 0
    while pos < len(answers):
        end = pos + 4 + int.from_bytes(answers[pos:pos + 4], "big")
        resp = decode_command(answers[pos + 4:end])
        resp.code, resp.remark = ResponseCode.FLUSH_DISK_TIMEOUT, remark
        out.append(encode_command(resp))
        pos = end
    return b"".join(out)
