#!/usr/bin/env python3
"""Instructions per TCP ``send_async`` on the client, each side alone, for callgrind (the counts
repeat on a loaded machine where wall-clock rates do not):

    # the caller: p.send_async(Message(T, 100 B)) into the lane of a started producer whose loop
    # never drains (the frames and waiters dropped every 2,000); per send = (Ir(N2) - Ir(N1)) / (N2 - N1)
    valgrind --tool=callgrind .venv/bin/python bench/async_send_cpu.py caller 2000
    valgrind --tool=callgrind .venv/bin/python bench/async_send_cpu.py caller 12000
    # the loop thread: this broker's SUCCESS answers (protocol/send_answer.py's pieces, as the
    # worker's C path writes them) to N lane sends, read by _answer.answers in 64 KiB reads;
    # per answer = Ir / N
    valgrind --tool=callgrind --toggle-collect=a_answers .venv/bin/python bench/async_send_cpu.py answers 12000
    # the same, each send with a callback (a Python function counting its calls), as a user who
    # passes one (the callback's own frame counted too)
    valgrind --tool=callgrind --toggle-collect=a_answers .venv/bin/python bench/async_send_cpu.py answers-cb 12000
    # the oneway lane's put (Lane.put) of one queue's frames, many a millisecond as at a real rate
    # (callgrind's slowness leaves a producer few a millisecond); per put = (Ir(N2) - Ir(N1)) / (N2 - N1)
    valgrind --tool=callgrind .venv/bin/python bench/async_send_cpu.py puts 20000
    valgrind --tool=callgrind .venv/bin/python bench/async_send_cpu.py puts 60000

The caller's count includes ``Message()`` and the loop (~2,000 instructions); no socket is used.
"""
from __future__ import annotations

import os
import socket
import struct
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shmq.client.message import Message, MessageQueue  # noqa: E402
from shmq.client.oneway import Lane  # noqa: E402
from shmq.client.producer import Producer  # noqa: E402
from shmq.client.route import TopicPublishInfo  # noqa: E402
from shmq.native import _answer  # noqa: E402
try:
    from shmq.protocol.send_answer import answer_pieces  # noqa: E402
except ImportError:  # a before-build older than protocol/send_answer.py: the worker's own copy
    from shmq.broker.worker.processors.send_fast import answer_pieces  # noqa: E402

BODY = b"x" * 100


def caller(n: int) -> None:
    ns = socket.create_server(("127.0.0.1", 0))  # a NameServer nobody asks: the route is set by hand
    p = Producer("pg-cpu", f"127.0.0.1:{ns.getsockname()[1]}", local="never").start()
    inst = p.instance
    inst.broker_addrs["b"] = {0: "127.0.0.1:1"}
    inst.publish["T"] = TopicPublishInfo("T", [MessageQueue("T", "b", q) for q in range(4)])
    p._sendable.add("T")
    inst._drain_scheduled = True  # the loop thread is never asked to drain
    lane, futs = inst.oneway_lane, []

    def run(k: int) -> None:
        send = p.send_async
        for _ in range(k // 2000):
            for _ in range(2000):
                futs.append(send(Message("T", BODY)))
            lane.clear()
            inst._submitted.clear()
            futs.clear()

    run(2000)  # warm: the route cache, the plan
    run(n)


def answers(n: int, with_callback: bool = False) -> None:
    pieces = answer_pieces()
    p = Producer("pg-cpu", local="never")
    mq = MessageQueue("T", "b", 0)
    t = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, False)
    lane = Lane([].append, "mark", 1 << 30, 1 << 30)
    conn = type("Conn", (), {})()
    m = Message("T", BODY)

    def frame(opaque: int, qoff: int) -> bytes:
        h = b"".join((pieces[0], b"7F000001000027100000000000%06X" % qoff, pieces[1], b"0", pieces[2], b"%d" % qoff,
                      pieces[3], b"%d" % opaque, pieces[4]))
        return struct.pack(">ii", 4 + len(h), len(h)) + h

    calls = [0]

    def counted(result) -> None:  # a user's callback
        calls[0] += 1

    cb = counted if with_callback else None
    done = 0
    while done < n:
        k = min(2000, n - done)
        futs = [lane.put_async("a", t.template.pieces, 0, None, m.body, m, p, cb, mq, 3.0, 0) for _ in range(k)]
        _, _, waiters, _ = lane.take()
        conn._pending = _answer.Pending()  # the connection's table (native/pending_table.c)
        conn._pending.update(waiters)  # the segment's Run moved in, as Connection.start_lane does
        data = b"".join(frame(o, done + j) for j, o in enumerate(waiters))
        pos = 0
        while pos < len(data):
            used, _, stop = _answer.answers(conn, data[pos:pos + 65536], 0)
            assert not stop, "an answer the C reader did not take"
            pos += used
        assert not conn._pending and all(f.done() for f in futs)
        done += k
    assert calls[0] == (n if with_callback else 0)


def puts(n: int) -> None:
    from shmq.client.oneway import EMONTH, LOOK
    p = Producer("pg", local="never")
    pieces = p._frames.get(MessageQueue("T", "b", 0), "TBW102", 4, False, True).template.pieces
    lane = Lane([].append, "mark", 1 << 30, 1 << 24)
    put, take = lane.put, lane.take
    for i in range(n):
        st = put("127.0.0.1:1", pieces, 0, 0, None, BODY)
        while st == LOOK or st == EMONTH:
            st = put("127.0.0.1:1", pieces, 0, 0, None, BODY)
        if not (i & 4095):
            take()


if __name__ == "__main__":
    {"caller": caller, "answers": answers, "answers-cb": lambda n: answers(n, True),
     "puts": puts}[sys.argv[1]](int(sys.argv[2]))
    sys.stdout.flush()
    os._exit(0)  # (the started producer's threads are not waited for)
