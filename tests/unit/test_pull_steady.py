"""A PushConsumer's steady pull answer handled in C (native/pull_steady.c) gives the consumer
what ``TcpPull._pulled`` in Python gives it: the same pulls (offsets, commit flags), the same
deliveries in the same order, the same ProcessQueue state (next offset, count, what it saw, its
spans), the same suggested broker and chain ends. Each script runs three ways: the Python decoder
(no C hook), the C read with the steady case off (``TcpPull._arm`` answering None: every answer
``_pulled``'s), and the C read with the steady case on. Covered: a plain stream, a tag filter
(C leaves it to Python), a queue dropped mid-stream, flow control (the threshold reached: the
chain pauses), an orderly consumer's gated queue, the error / not-found / moved answers between
steady ones, and the hand-over done in C to a real ConsumePool (the task queued, the wake-up owed
to the loop's selector) as ConsumePool.submit does it. The steady mode's connection is a client's,
whose next PULL is queued by the C start_frame (native/conn_queue.c), the others' by Python's."""
from __future__ import annotations

import asyncio
import threading
import time
from types import SimpleNamespace

import pytest

from shmq.client import tcp_pull
from shmq.client.consumer_core import ProcessQueue
from shmq.client.handoff import ConsumePool, HandoffSelector
from shmq.client.instance import ClientInstance
from shmq.client.message import MessageQueue
from shmq.client.remote_send import answers
from shmq.protocol import ResponseCode
from shmq.protocol.bodies import SubscriptionData
from shmq.protocol.command import decode_command
from shmq.protocol.transport import ClientConnection, Connection, Limits

from .test_pull_answer import BROKER, _bodies, answer
from .test_pulled_records import FIELDS
from .test_remote_answer import _Transport


class Core:
    """What a TcpPull uses of its ConsumerCore, the route a real ClientInstance.read_addr reads;
    every effect logged."""
    group, model, pull_batch_size, _running = "G", "CLUSTERING", 32, True
    suspend_timeout_ms = 15000

    def __init__(self, topic, conn, threshold=1000, tags=None, gated=False, pool=None):
        self.log, self.threshold, self._gated, self.pool = [], threshold, gated, pool
        self.subscriptions = {topic: SubscriptionData(topic=topic, subString="*", subVersion=1, expressionType="TAG")}
        self._filters = {topic: (tags, None)} if tags is not None else {}
        self._pull_from = {}
        self.offsets = SimpleNamespace(table={}, update=lambda mq, off, increase_only=True:
                                       self.log.append(("offset", off, increase_only)))
        client = SimpleNamespace(rpc_hook=None)

        async def connect(addr):
            return client, conn
        self.instance = inst = SimpleNamespace(broker_addrs={BROKER: {0: "127.0.0.1:1", 1: "127.0.0.1:2"}},
                                               _unreachable={}, connect=connect)
        inst.read_addr = ClientInstance.read_addr.__get__(inst)

    def _may_pull(self, pq):
        return True

    def _steady_pool(self):
        return None if self.pool is None else self.pool.steady(self._consume)

    def _consume(self, pq, msgs):
        pass

    def _accept(self, topic, msgs):  # ConsumerCore._accept
        return [m for m in msgs if m.tags in self._filters[topic][0]]

    def commit(self, pq, off):
        self.log.append(("commit", off))

    def _deliver(self, pq, msgs):
        self.log.append(("deliver", [tuple(getattr(m, f) for f in FIELDS) for m in msgs]))


def state(pq, core):
    return ("pq", pq.next_offset, pq.count, pq.max_seen, pq._low, sorted(pq._spans), sorted(pq._single),
            dict(core._pull_from))


CURRENT = [None]  # the running script's Core, for a step that changes it mid-stream


def run(mode, script, topic="T", **kw):
    """The chain of ``topic``:0 fed ``script``'s answers (step(opaque, queueOffset, pq) -> frame):
    mode "python" (no C hook), "c" (C read, steady off), "steady". Returns (log, _pulled calls)."""
    pulled = [0]
    real = tcp_pull.TcpPull._pulled

    def counted(self, *a):
        pulled[0] += 1
        return real(self, *a)

    async def go():
        # steady: a client's connection, whose start_frame is the C one pull_steady.c calls directly
        # (native/conn_queue.c); the other modes the Python Connection.start_frame: the same log
        conn = (ClientConnection if mode == "steady" else Connection)({}, Limits())
        conn.fast = None if mode == "python" else answers
        t = _Transport()
        conn.connection_made(t)
        core = CURRENT[0] = Core(topic, conn, **kw)
        log = core.log
        pq = ProcessQueue(MessageQueue(topic, BROKER, 0), 0)
        puller = tcp_pull.TcpPull(core, pq)

        async def chain():
            while not pq.dropped:
                delay = await puller.run()
                log.append(("end", delay))
                await asyncio.sleep(delay and 0.001)
        task = asyncio.ensure_future(chain())
        sent = 0
        for step in script:
            for _ in range(2000):
                if len(t.out) > sent or pq.dropped:
                    break
                await asyncio.sleep(0.0005)
            if pq.dropped or len(t.out) == sent:  # taken away, or paused (flow control)
                log.append(("no pull", pq.dropped))
                break
            assert len(t.out) == sent + 1, "one pull in flight"
            req = decode_command(t.out[sent][4:])
            sent += 1
            f = req.ext_fields
            log.append(("pull", int(f["queueOffset"]), int(f["sysFlag"]), int(f["commitOffset"])))
            frame = step(req.opaque, int(f["queueOffset"]), pq)
            conn.data_received(frame)
            log.append(state(pq, core))
            log.append(("pending", sorted(conn._pending)))
        for _ in range(20):
            await asyncio.sleep(0.001)
        pq.dropped = True
        task.cancel()
        conn.connection_lost(None)
        return log
    mp = pytest.MonkeyPatch()
    mp.setattr(tcp_pull.TcpPull, "_pulled", counted)
    mp.setattr(tcp_pull, "PULL_DELAY_ON_ERROR_S", 0.002)
    mp.setattr(tcp_pull, "FLOW_CONTROL_DELAY_S", 0.002)
    if mode != "steady":
        mp.setattr(tcp_pull.TcpPull, "_arm", lambda self, conn, addr: None)
    try:
        return asyncio.run(go()), pulled[0]
    finally:
        mp.undo()


def three(script, **kw):
    """The three ways' logs, checked equal; the _pulled calls of each."""
    (py, n_py), (c, n_c), (st, n_st) = (run(m, script, **kw) for m in ("python", "c", "steady"))
    # a paused chain ends once per FLOW_CONTROL_DELAY_S while it waits: how often is the clock's
    py, c, st = ([e for i, e in enumerate(x) if not (e[0] == "end" and i and x[i - 1] == e)] for x in (py, c, st))
    assert c == py
    assert st == py
    return st, (n_py, n_c, n_st)


def offsets_delivered(log):
    return [m[8] for e in log if e[0] == "deliver" for m in e[1]]


def test_a_plain_stream_with_other_answers_between_is_the_same_and_mostly_cs(store_root):
    b = _bodies(store_root)
    T = b["T"]
    script = [
        lambda o, off, pq: answer(o, body=T[0], nxt=1),                                  # steady
        lambda o, off, pq: answer(o, body=T[1], nxt=2),                                  # steady
        lambda o, off, pq: answer(o, code=ResponseCode.PULL_NOT_FOUND, nxt=2, remark="OFFSET_FOUND_NULL"),
        lambda o, off, pq: answer(o, body=b["T2"], nxt=5),                               # two records: steady
        lambda o, off, pq: answer(o, code=ResponseCode.PULL_RETRY_IMMEDIATELY, nxt=6, remark="NO_MATCHED_MESSAGE"),
        lambda o, off, pq: answer(o, body=T[6], nxt=7),                                  # steady
        lambda o, off, pq: answer(o, code=ResponseCode.PULL_OFFSET_MOVED, nxt=7, remark="OFFSET_TOO_SMALL"),
        lambda o, off, pq: answer(o, body=T[7], nxt=8),                                  # steady
        lambda o, off, pq: answer(o, body=T[3], nxt=8),                                  # below max_seen: Python's put
        lambda o, off, pq: answer(o, code=ResponseCode.SUBSCRIPTION_NOT_LATEST, remark="not latest"),  # ends
        lambda o, off, pq: answer(o, body=T[8], nxt=9, suggest=1),                       # a slave: Python, ends
        lambda o, off, pq: answer(o, body=T[2], nxt=10, suggest=1),                      # (the slave's answer: steady)
        lambda o, off, pq: answer(o, body=T[5], nxt=11),                                 # back to the master: ends
        lambda o, off, pq: answer(o, body=T[4], nxt=12),
    ]
    log, calls = three(script)
    assert offsets_delivered(log) == [0, 1, 3, 4, 6, 7, 3, 8, 2, 5, 4]
    assert [e[1] for e in log if e[0] == "pull"] == [0, 1, 2, 2, 5, 6, 7, 7, 8, 8, 8, 9, 10, 11]
    # the commit flag goes to the master only, once an offset is known (set by OFFSET_MOVED: 7)
    assert ("offset", 7, False) in log
    assert calls[1] == 10 and calls[2] == 5  # SUCCESS answers read in C: 10, of which the steady case took 5


def test_a_tag_filter_is_left_to_python(store_root):
    b = _bodies(store_root)
    T = b["T"]
    script = [lambda o, off, pq, i=i: answer(o, body=T[i], nxt=i + 1) for i in range(5)]
    log, calls = three(script, tags={"only-tags", "big"})
    assert offsets_delivered(log) == [1, 4]
    assert calls == (5, 5, 5)


def test_a_queue_dropped_mid_stream_delivers_nothing_more(store_root):
    b = _bodies(store_root)
    T = b["T"]

    def drop(o, off, pq):
        pq.dropped = True  # the rebalance took the queue while this pull was in flight
        return answer(o, body=T[2], nxt=3)
    script = [lambda o, off, pq: answer(o, body=T[0], nxt=1), lambda o, off, pq: answer(o, body=T[1], nxt=2), drop,
              lambda o, off, pq: answer(o, body=T[3], nxt=4)]
    log, calls = three(script)
    assert offsets_delivered(log) == [0, 1]
    assert ("end", 0.0) in log
    assert calls[1:] == (3, 1)  # the dropped queue's answer: Python's


def test_flow_control_pauses_the_chain_as_python_does(store_root):
    b = _bodies(store_root)
    T = b["T"]
    script = [lambda o, off, pq, i=i: answer(o, body=T[i], nxt=i + 1) for i in range(4)]
    log, calls = three(script, threshold=3)  # nothing consumed: the third message fills the queue
    assert offsets_delivered(log) == [0, 1, 2]
    assert ("end", 0.002) in log and ("no pull", False) in log  # paused while the queue is full
    assert [e[2] for e in log if e[0] == "pq"] == [1, 2, 3]  # count
    assert calls[1:] == (3, 1)  # the dropped queue's answer: Python's


def test_an_orderly_consumers_gated_queue_stays_pythons(store_root):
    b = _bodies(store_root)
    T = b["T"]
    script = [lambda o, off, pq, i=i: answer(o, body=T[i], nxt=i + 1) for i in range(4)]
    log, calls = three(script, gated=True)
    assert offsets_delivered(log) == [0, 1, 2, 3]
    assert calls == (4, 4, 4)


def test_the_hand_over_in_c_is_submits(store_root):
    """With the consume pool's hand-over (PushConsumer's, not orderly): each steady answer queues
    (fn, (pq, msgs)) after its next PULL, and owes the loop's selector one wake-up, as
    ConsumePool.submit from the loop thread does; nothing is posted at once."""
    b = _bodies(store_root)
    T = b["T"]
    sel = HandoffSelector()
    pool = ConsumePool(1, "steady-test", sel, threading.current_thread())
    seq0 = pool._h.seq
    try:
        seen = []

        def step(i):
            def f(o, off, pq):
                seen.append((len(pool._tasks), pool._h.posts))
                return answer(o, body=T[i], nxt=i + 1)
            return f
        pool._stopping = False
        log, pulled = run("steady", [step(i) for i in range(3)], pool=pool)
        assert pulled == 0
        tasks = list(pool._tasks)
        assert [(fn.__name__, [m.queue_offset for m in args[1]]) for fn, args in tasks] == \
            [("_consume", [0]), ("_consume", [1]), ("_consume", [2])]
        assert pool._h.posts == 3 and sel.owed and pool._h.seq == seq0  # owed, not posted
        assert seen == [(0, 0), (1, 1), (2, 2)]
        assert not [e for e in log if e[0] == "deliver"]
    finally:
        pool._tasks.clear()
        pool._h.posts = 0
        pool.shutdown()
        sel.close()


def test_a_filter_or_an_unreachable_mark_set_mid_stream_is_seen_by_the_armed_chain(store_root):
    """The chain holds the consumer's filters and the instance's unreachable marks from its start
    (TcpPull._arm): a filter subscribed, or the master marked unreachable, while it runs is seen
    by the next answer, which goes to Python as it would have from the start."""
    b = _bodies(store_root)
    T = b["T"]

    def subscribe(o, off, pq):
        CURRENT[0]._filters["T"] = ({"only-tags", "big"}, None)  # ConsumerCore.subscribe's, in place
        return answer(o, body=T[2], nxt=3)
    script = [lambda o, off, pq: answer(o, body=T[0], nxt=1), lambda o, off, pq: answer(o, body=T[1], nxt=2),
              subscribe, lambda o, off, pq: answer(o, body=T[3], nxt=4), lambda o, off, pq: answer(o, body=T[4], nxt=5)]
    log, calls = three(script)
    assert offsets_delivered(log) == [0, 1, 4]  # T[2] and T[3] filtered out once subscribed
    assert calls[1:] == (5, 3)  # _pulled calls: the steady case took T[0] and T[1] only

    def unreachable(o, off, pq):
        CURRENT[0].instance._unreachable["127.0.0.1:1"] = time.monotonic() + 60  # the master, marked
        return answer(o, body=T[1], nxt=2)
    script = [lambda o, off, pq: answer(o, body=T[0], nxt=1), unreachable]
    log, calls = three(script)
    assert offsets_delivered(log) == [0, 1]
    assert calls[1:] == (2, 1)  # _pulled calls: the answer after the mark is Python's
