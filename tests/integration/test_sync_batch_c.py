"""A TCP ``send_batch``'s steady case whole in C (native/sync_send.c ``batch``, a never-local
producer's ``_hot_batch``) against a real broker: its answers are the Python path's (the same
fields, the ids the consumer gets, the queues in the same round robin); every batch it does not
take (the first to a topic, keys, several topics, too large, empty, a retry topic, a topic with
no route) is the Python path's with that path's error and nothing drawn; and a try that breaks
goes on in the Python path's retries."""
from __future__ import annotations

import socket

import pytest

from shmq import Message, Producer, SendStatus
from shmq.client import sync_send
from shmq.client.local_send import _tags_head
from shmq.errors import InvalidMessage, MessageTooLarge, TopicNotExist
from shmq.message.names import RETRY_PREFIX
from shmq.native import _sync, hot_encode_batch

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import Collector, consumer, env  # noqa: F401 (env: a fixture)
from .conftest import namesrv, processes, start_namesrv  # noqa: F401



def _bind(fallback, resume):
    _sync.bind_batch(hot_encode_batch, sync_send._UNIQ_ADDR, Message, _tags_head, fallback, resume, RETRY_PREFIX)


@pytest.fixture
def counted():
    """How often the C step handed a batch to send_batch_plain (before the draw) or to _resume
    (after it)."""
    calls = {"fallback": 0, "resume": 0}

    def fallback(p, msgs):
        calls["fallback"] += 1
        return sync_send.send_batch_plain(p, msgs)

    def resume(*a):
        calls["resume"] += 1
        return sync_send._resume(*a)

    _bind(fallback, resume)
    try:
        yield calls
    finally:
        _bind(sync_send.send_batch_plain, sync_send._resume)


def _batch(tag: str, n: int = 8, **kw):
    return [Message("T", b"%s-%d" % (tag.encode(), i), **kw) for i in range(n)]


def _fields(r):
    return (type(r), r.status, r.queue.topic, r.queue.broker_name, len(r.msg_id.split(",")),
            tuple(len(x) for x in r.msg_id.split(",")), len(r.offset_msg_id.split(",")), r.transaction_id)


def test_steady_batches_are_c_and_answer_as_the_python_path(env, counted):
    ns, _ = env
    sent = []
    with Producer("pg", ns.addr, local="never") as p:
        first = p.send_batch(_batch("first"))  # a topic no send has checked: the Python path's
        second = p.send_batch(_batch("second"))  # its route's batch templates cached (send_batch_plain)
        assert counted == {"fallback": 2, "resume": 0}
        rs = [p.send_batch(_batch("c%d" % i, tags="TagA" if i % 2 else None)) for i in range(6)]
        assert counted == {"fallback": 2, "resume": 0}  # all six whole in C
        py = p._send_batch(_batch("py"))  # the general path, drawing from the same round robin
        last = p.send_batch(_batch("last"))
        sent = [(b"first", first), (b"second", second), *[(b"c%d" % i, r) for i, r in enumerate(rs)], (b"py", py), (b"last", last)]
    results = [r for _, r in sent]
    assert all(r.status is SendStatus.SEND_OK for r in results)
    assert len({_fields(r) for r in results}) == 1  # the same fields, kinds and counts
    qids = [r.queue.queue_id for r in results]
    assert qids == [(qids[0] + i) % 4 for i in range(len(qids))]
    col = Collector()
    c = consumer(ns.addr, "cg", "T", col)
    try:
        assert col.wait_for(lambda s: len(s.msgs) >= 8 * len(sent)), len(col.msgs)
    finally:
        c.shutdown()
    got = {m.body: m for m in col.msgs}
    for tag, r in sent:
        ms = [got[b"%s-%d" % (tag, i)] for i in range(8)]
        assert [m.msg_id for m in ms] == r.msg_id.split(",")
        assert [m.queue_offset for m in ms] == list(range(r.queue_offset, r.queue_offset + 8))
        assert {m.queue_id for m in ms} == {r.queue.queue_id}
        assert {m.tags or None for m in ms} == ({"TagA"} if tag in (b"c1", b"c3", b"c5") else {None})


def test_batches_it_does_not_take_are_the_python_paths_with_nothing_drawn(env, counted):
    ns, _ = env
    with Producer("pg", ns.addr, local="never") as p:
        a = p.send_batch(_batch("a"))
        b = p.send_batch(_batch("b"))
        before = dict(counted)
        with pytest.raises(MessageTooLarge):  # over the 4 MiB a batch may be
            p.send_batch([Message("T", b"z" * (1 << 20)) for _ in range(5)])
        with pytest.raises(InvalidMessage):
            p.send_batch([Message("T", b"x"), Message("Other", b"y")])
        with pytest.raises(InvalidMessage):
            p.send_batch([])
        with pytest.raises(InvalidMessage):
            p.send_batch([Message(RETRY_PREFIX + "g", b"x")])
        keyed = p.send_batch(_batch("k", keys="K1"))  # keys: not uniform, the Python path's
        c = p.send_batch(_batch("c"))
        assert counted["resume"] == 0
        # too large, two topics, empty, a retry topic, keyed: each handed over before the draw
        assert counted["fallback"] - before["fallback"] == 5
    qids = [r.queue.queue_id for r in (a, b, keyed, c)]
    assert qids == [(qids[0] + i) % 4 for i in range(4)]  # the refused ones drew no queue
    assert all(r.status is SendStatus.SEND_OK for r in (a, b, keyed, c))


def test_a_topic_with_no_route_fails_as_on_the_python_path(env, counted):
    ns, _ = env
    with Producer("pg", ns.addr, local="never") as p:
        p.create_topic_key = "NoSuchKey"  # no default route either: the topic cannot be routed
        with pytest.raises(TopicNotExist) as c_err:
            p.send_batch([Message("NoSuchTopic", b"x")])
        with pytest.raises(TopicNotExist) as py_err:
            p._send_batch([Message("NoSuchTopic", b"x")])
    assert type(c_err.value) is type(py_err.value) and str(c_err.value) == str(py_err.value)


def test_a_broken_connection_is_dropped_and_the_batch_retried(env, counted):
    ns, _ = env
    with Producer("pg", ns.addr, local="never") as p:
        p.send_batch(_batch("a"))
        first = p.send_batch(_batch("b"))
        (addr, conn), = p._tls.conns.items()
        conn.sock.shutdown(socket.SHUT_RDWR)  # the connection breaks under the producer
        r = p.send_batch(_batch("c"))
        assert r.status is SendStatus.SEND_OK and len(r.msg_id.split(",")) == 8
        assert counted["resume"] == 1  # the C try failed; its retry was the Python path's
        assert conn.sock.fileno() == -1 and p._tls.conns[addr] is not conn  # closed, replaced
        # the failed try drew queue first+1; the retry the next (as _batch_tries does)
        assert r.queue.queue_id == (first.queue.queue_id + 2) % 4
        again = p.send_batch(_batch("d"))  # the new connection: C again
        assert again.status is SendStatus.SEND_OK and counted["resume"] == 1
