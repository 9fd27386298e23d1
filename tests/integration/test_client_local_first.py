"""The first message to each queue of a topic a local producer has learnt takes nothing off its
path but the append: the producer built its writers and had the queues' files mapped (and the
page of each next entry reserved) when it fetched the route. A topic no producer opened takes
no disk for its queues."""
from __future__ import annotations

import os
from pathlib import Path

from shmq import Message, Producer, SendStatus
from shmq.native import lib

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import make_topic, wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401


def _cq_bytes(store: str, topic: str) -> int:
    root = Path(store) / "consumequeue" / topic
    return sum(os.stat(os.path.join(d, f)).st_blocks * 512 for d, _, fs in os.walk(root) for f in fs)


def test_first_send_to_each_queue_of_a_learnt_topic_maps_nothing(namesrv, start_broker):
    b = start_broker(namesrv)
    for t in ("Learnt", "Unopened"):
        make_topic(b, t, 4)
        wait_route(namesrv.addr, t)
    with Producer("pg-first", namesrv.addr, local="always") as p:
        p.send(Message("Learnt", b"warm"))  # learns the route: every queue prepared before the append
        before = lib.shmq_cq_attaches()
        sent = [p.send(Message("Learnt", b"m%d" % i)) for i in range(8)]
        assert lib.shmq_cq_attaches() == before  # no queue's file opened or mapped by a send
    assert all(r.status is SendStatus.SEND_OK for r in sent)
    assert {r.queue.queue_id for r in sent} == {0, 1, 2, 3}
    assert _cq_bytes(b.store, "Learnt") <= 4 * 4096  # a page per queue of the opened topic
    assert _cq_bytes(b.store, "Unopened") == 0       # and none for a topic no producer opened
