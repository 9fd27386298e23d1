"""Message priority the way RocketMQ users build it: RocketMQ has no per-message priority, so
urgent messages go to their own topic, and the consumer always drains that topic before it
takes anything from the normal one.

    python examples/priority.py            # against `scripts/run` (127.0.0.1:9876)

``consume_with_priority`` is the pattern: two lite pull consumers, the high one polled without
waiting first; only when it is empty does the consumer wait (briefly) on the normal one, so a
high-priority message waits at most for the normal batch in hand.
"""
from __future__ import annotations

import sys
import threading

from shmq import Message, Producer, PullConsumer


def consume_with_priority(high: PullConsumer, normal: PullConsumer, handle, stop: threading.Event,
                          normal_wait: float = 0.05) -> None:
    """Handle every high-priority message before any normal one that is not yet in hand. The
    normal consumer's poll_batch_size bounds how long an urgent message can wait."""
    while not stop.is_set():
        msgs = high.poll(0)
        if not msgs:
            msgs = normal.poll(normal_wait)
        for m in msgs:
            handle(m)


def main(namesrv: str = "127.0.0.1:9876") -> None:
    with Producer("prio-producer", namesrv) as p:
        for i in range(100):
            p.send(Message("Orders", b"normal-%d" % i))
        p.send(Message("OrdersUrgent", b"urgent-0"))
    high = PullConsumer("prio-consumer-high", namesrv, consume_from="FIRST_OFFSET")
    high.subscribe("OrdersUrgent", "*")
    normal = PullConsumer("prio-consumer", namesrv, consume_from="FIRST_OFFSET", poll_batch_size=8)
    normal.subscribe("Orders", "*")
    high.start()
    normal.start()
    stop = threading.Event()
    seen = []

    def handle(m):
        seen.append(m.body)
        if len(seen) >= 101:
            stop.set()
    try:
        consume_with_priority(high, normal, handle, stop)
    finally:
        high.shutdown()
        normal.shutdown()
    print("urgent handled as message", seen.index(b"urgent-0") + 1, "of", len(seen))


if __name__ == "__main__":
    main(*sys.argv[1:])
