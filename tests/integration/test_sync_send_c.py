"""A sync send over TCP in one C call (client/sync_send.py, native/sync_send.c) against a real
broker: the consumer gets what was sent (body, tags, flag, the UNIQ_KEY the SendResult names),
batches included, with the spinning wait too; and a connection broken under the producer is
dropped and the send retried on a new one, with no error to the caller."""
from __future__ import annotations

import socket

import pytest

from shmq import Message, Producer, SendStatus
from shmq.client import sync_send

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import Collector, consumer, env, make_topic, wait_route  # noqa: F401 (env: a fixture)
from .conftest import namesrv, processes, start_namesrv  # noqa: F401



@pytest.mark.parametrize("spin_us", [0, 100])
def test_what_the_c_send_stores_is_what_was_sent(env, spin_us):
    ns, _ = env
    sent = {}
    with Producer("pg", ns.addr, local="never", sync_spin_us=spin_us) as p:
        p.send(Message("T", b"first"))  # the topic's first send checks it (Python), later ones are C
        assert sync_send.plain(p, Message("T", b"x", tags="A"))
        for i in range(20):
            m = Message("T", b"m%d" % i, tags=["A", 'q"\\', None][i % 3], flag=i % 4)
            r = p.send(m)
            assert r.status is SendStatus.SEND_OK and len(r.msg_id) == 32 and len(r.offset_msg_id) == 32
            sent[m.body] = (m.tags, m.flag, r.msg_id, r.queue.queue_id, r.queue_offset)
        for i in range(3):  # ordered sends: the C send too, to the queue the selector picked
            m = Message("T", b"o%d" % i, tags="O")
            r = p.send_orderly(m, lambda qs, msg, arg: qs[arg % len(qs)], 2)
            assert r.queue.queue_id == 2
            sent[m.body] = (m.tags, m.flag, r.msg_id, 2, r.queue_offset)
        rb = p.send_batch([Message("T", b"b%d" % i) for i in range(5)])
        assert rb.status is SendStatus.SEND_OK and rb.msg_id.count(",") == 4
    got = {m.body: m for m in _consumed(ns.addr, "T", 29)}
    for body, (tags, flag, msg_id, qid, off) in sent.items():
        m = got[body]
        assert (m.tags or None, m.flag, m.msg_id, m.queue_id, m.queue_offset) == (tags, flag, msg_id, qid, off)
    assert [got[b"b%d" % i].msg_id for i in range(5)] == rb.msg_id.split(",")


def test_a_broken_connection_is_dropped_and_the_send_retried(env):
    ns, b = env
    with Producer("pg", ns.addr, local="never") as p:
        p.send(Message("T", b"first"))
        p.send(Message("T", b"second"))
        (addr, conn), = p._tls.conns.items()
        conn.sock.shutdown(socket.SHUT_RDWR)  # the connection breaks under the producer
        r = p.send(Message("T", b"third"))
        assert r.status is SendStatus.SEND_OK
        assert conn.sock.fileno() == -1 and p._tls.conns[addr] is not conn  # closed, replaced


def test_plain_sends_take_the_producers_first_step_in_round_robin(env, monkeypatch):
    """A producer that never sends locally makes a plain send's first try in ``send_plain``
    (its ``_hot``), drawing the queues in the round robin the general path draws them in; a
    message that is not plain is the general path's, in the same rotation."""
    ns, b = env
    calls = []
    general = Producer._tries
    monkeypatch.setattr(Producer, "_tries", lambda self, *a: calls.append(a[4]) or general(self, *a))
    with Producer("pg", ns.addr, local="never") as p:
        first = p.send(Message("T", b"0"))  # a topic not checked yet: the general way
        rs = [p.send(Message("T", b"%d" % i)) for i in range(1, 6)]
        keyed = p.send(Message("T", b"k", keys="K"))  # not plain: _send
        last = p.send(Message("T", b"7"))
    assert calls == [None, None]  # only those two went the general way (no queue drawn before it)
    qids = [r.queue_id for r in [first, *rs, keyed, last]]
    assert qids == [(qids[0] + i) % 4 for i in range(8)]
    assert all(r.status is SendStatus.SEND_OK for r in [first, *rs, keyed, last])


def test_a_new_topics_first_send_takes_the_c_step_once_its_route_arrived(env, monkeypatch):
    """issue 16: a topic is checked as sendable and its queues' templates made when its route
    arrives (Producer._route_arrived), so the first send to it is the C step's (no Python
    _tries / _wire), and the consumer gets it; a name a client may not send to is not marked
    so, and its send still raises _prepare's error."""
    from shmq.client.producer import Producer as P
    from shmq.errors import InvalidTopic

    ns, b = env
    make_topic(b, "N", 4)
    wait_route(ns.addr, "N")
    with Producer("pg", ns.addr, local="never") as p:
        p.send(Message("T", b"first"))  # the thread's connection to the broker, made
        info = p._publish_info("N")  # the route, as a first send fetches it
        assert "N" in p._sendable and p._lane_state.routes["N"][0] is info

        def no(*a, **k):
            raise AssertionError("the Python send path was taken")

        monkeypatch.setattr(P, "_tries", no)
        monkeypatch.setattr(P, "_wire", no)
        r = p.send(Message("N", b"n-first"))
        assert r.status is SendStatus.SEND_OK
        monkeypatch.undo()
        p._route_arrived("SCHEDULE_TOPIC_XXXX", info)
        assert "SCHEDULE_TOPIC_XXXX" not in p._sendable
        with pytest.raises(InvalidTopic):
            p.send(Message("SCHEDULE_TOPIC_XXXX", b"x"))
    (m,) = _consumed(ns.addr, "N", 1)
    assert m.body == b"n-first" and m.msg_id == r.msg_id


def _consumed(namesrv: str, topic: str, n: int) -> list:
    """What a PushConsumer of group cg gets of ``topic`` once it has ``n`` messages."""
    col = Collector()
    c = consumer(namesrv, "cg", topic, col)
    try:
        assert col.wait_for(lambda s: len(s.msgs) >= n), len(col.msgs)
    finally:
        c.shutdown()
    return col.msgs
