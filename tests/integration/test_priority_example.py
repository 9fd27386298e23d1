"""The documented priority pattern (examples/priority.py): urgent messages sent while a backlog
of normal ones is being worked through are handled ahead of that backlog."""
from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path

from shmq import Message, Producer, PullConsumer

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import CONSUMER_FAST, make_topic, wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "priority.py"


def load_example():
    spec = importlib.util.spec_from_file_location("priority_example", EXAMPLE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_urgent_messages_overtake_the_backlog(namesrv, start_broker):
    ex = load_example()
    b = start_broker(namesrv)
    for t in ("Work", "WorkUrgent"):
        make_topic(b, t, 2)
        wait_route(namesrv.addr, t)
    with Producer("prio-p", namesrv.addr) as p:
        for i in range(300):
            p.send(Message("Work", b"n%d" % i))
        high = PullConsumer("prio-high", namesrv.addr, consume_from="FIRST_OFFSET", **CONSUMER_FAST)
        high.subscribe("WorkUrgent", "*")
        normal = PullConsumer("prio-normal", namesrv.addr, consume_from="FIRST_OFFSET", poll_batch_size=4,
                              **CONSUMER_FAST)
        normal.subscribe("Work", "*")
        high.start()
        normal.start()
        handled: list[bytes] = []
        stop = threading.Event()
        urgent_sent_at = []

        def handle(m):
            handled.append(m.body)
            time.sleep(0.002)  # slow work: the backlog takes a while
            if len(handled) == 50:
                for i in range(10):
                    p.send(Message("WorkUrgent", b"u%d" % i))
                urgent_sent_at.append(len(handled))
            if len(handled) >= 310:
                stop.set()
        t = threading.Thread(target=ex.consume_with_priority, args=(high, normal, handle, stop))
        t.start()
        try:
            t.join(60)
            assert not t.is_alive(), f"handled {len(handled)} of 310"
        finally:
            stop.set()
            t.join()
            high.shutdown()
            normal.shutdown()
    urgent_at = [i for i, body in enumerate(handled) if body.startswith(b"u")]
    assert len(urgent_at) == 10
    # all ten within the normal batches already in hand when they arrived, far before the
    # ~250 normal messages still waiting
    assert max(urgent_at) < urgent_sent_at[0] + 10 + 40, urgent_at
