"""A PushConsumer's PULL answers read in C from the read buffer (native/pull_answer.c, through the
client connection's fast hook ``answers``) give the consumer exactly what the Python decoder
gives it: a TcpPull chain on a client Connection with the C hook and one without, fed the same
broker answers in the same chunks, sends the same pulls (offsets, commit flags), delivers the
same messages field for field, commits the same offsets and ends its chains with the same delays.
The steady answer (SUCCESS, this broker's header, plain records of the queue's topic) is taken
by C; every other one (PULL_NOT_FOUND, RETRY_IMMEDIATELY, OFFSET_MOVED, an error code, a binary
header, a compressed record, a retry queue, a stopped chain's late answer) by Python, as before."""
from __future__ import annotations

import asyncio
import zlib
from types import SimpleNamespace

import pytest

from shmq.client import tcp_pull
from shmq.client.consumer_core import ProcessQueue
from shmq.client.message import MessageQueue
from shmq.client.remote_send import answers
from shmq.message.layout import FLAG_COMPRESSED
from shmq.native import _answer
from shmq.protocol import RemotingCommand, RequestCode, ResponseCode, SerializeType
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.transport import Connection, Limits
from shmq.protocol.bodies import SubscriptionData
from shmq.store import MessageStore

from ..conftest import small_config
from .test_pulled_records import FIELDS
from .test_remote_answer import _Transport

BROKER = "b1"


class Core:
    """What a TcpPull uses of its ConsumerCore; every effect it has is logged."""
    group, model, pull_batch_size, threshold, _running = "G", "CLUSTERING", 32, 1000, True
    suspend_timeout_ms = 15000

    def __init__(self, topic, conn):
        self.log = []
        self.subscriptions = {topic: SubscriptionData(topic=topic, subString="*", subVersion=1, expressionType="TAG")}
        self._pull_from = {}
        self.offsets = SimpleNamespace(table={}, update=lambda mq, off, increase_only=True:
                                       self.log.append(("offset", off, increase_only)))
        client = SimpleNamespace(rpc_hook=None)

        async def connect(addr):
            return client, conn
        # brokerId 1 (a slave suggested) is another address: the chain ends and starts again
        self.instance = SimpleNamespace(read_addr=lambda name, bid: (f"127.0.0.1:{1 + bid}", bid > 0), connect=connect)

    _gated = False  # ConsumerCore's: _may_pull is asked only when it can answer False
    _filters = {}   # ConsumerCore's: no tag filter (_accept is asked only for a topic with one)

    def _may_pull(self, pq):
        return True

    def _steady_pool(self):  # ConsumerCore's: the C steady path calls _deliver
        return None

    def _accept(self, topic, msgs):
        return msgs

    def commit(self, pq, off):
        self.log.append(("commit", off))

    def _deliver(self, pq, msgs):
        self.log.append(("deliver", [tuple(getattr(m, f) for f in FIELDS) for m in msgs]))


def _bodies(store_root):
    """Pulled bodies as the broker sends them: T's records (from offset 0, 1, ...), a compressed
    record of Z, and the retry topic's record (its messages show their original topic)."""
    from .test_local_read import _records
    store = MessageStore.open(small_config(store_root))
    try:
        _records(store)
        store.put("Z", 0, zlib.compress(b"z" * 500), sysflag=FLAG_COMPRESSED)

        def body(topic, off, n):
            return b"".join(bytes(v) for v in store.get_messages(topic, 0, off, n, max_bytes=1 << 30).messages)
        return {"T": [body("T", i, 1) for i in range(9)], "T2": body("T", 3, 2), "Z": body("Z", 0, 1),
                "R": body("%RETRY%g", 0, 1)}
    finally:
        store.close()


def answer(opaque, code=0, body=b"", nxt=0, suggest=0, remark="FOUND", binary=False, ext=None):
    """The broker's answer to a pull, encoded by shmq's one encoder (the worker's both paths)."""
    if ext is None:
        ext = {"suggestWhichBrokerId": str(suggest), "nextBeginOffset": str(nxt), "minOffset": "0",
               "maxOffset": str(nxt)}
    resp = RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=opaque).make_response(code, remark, ext, body)
    if binary:
        resp.serialize_type = SerializeType.ROCKETMQ
    return encode_command(resp)


def run_chain(fast, topic, script, chunk=None):
    """A TcpPull chain of queue ``topic``:0 on a client Connection with ``fast``; each script step
    makes the answer to the pull in flight (from that pull's opaque and queueOffset), which is
    read in chunks of ``chunk`` bytes. Returns the log: pulls sent (offset, sysFlag, commit),
    what the core saw, the chain's delays; and how many answers C took."""
    taken, in_python = [0], [False]
    real, real_set = tcp_pull.TcpPull._pulled, tcp_pull.TcpPull.set_result

    def counted(self, *a):  # _pulled from C (the Python decoder's SUCCESS reaches it through set_result)
        taken[0] += not in_python[0]
        return real(self, *a)

    def python_path(self, resp):
        in_python[0] = True
        try:
            return real_set(self, resp)
        finally:
            in_python[0] = False

    async def go():
        conn = Connection({}, Limits())
        conn.fast = fast
        t = _Transport()
        conn.connection_made(t)
        core = Core(topic, conn)
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
            for _ in range(2000):  # the next pull: at once, or after the chain's delay
                if len(t.out) > sent:
                    break
                await asyncio.sleep(0.0005)
            assert len(t.out) == sent + 1, "one pull in flight"
            req = decode_command(t.out[sent][4:])
            sent += 1
            f = req.ext_fields
            log.append(("pull", int(f["queueOffset"]), int(f["sysFlag"]), int(f["commitOffset"])))
            frame = step(req.opaque, int(f["queueOffset"]))
            n = chunk or len(frame)
            for i in range(0, len(frame), n):
                conn.data_received(frame[i:i + n])
            log.append(("pending", sorted(conn._pending)))
        pq.dropped = True
        task.cancel()
        conn.connection_lost(None)
        return log
    mp = pytest.MonkeyPatch()
    mp.setattr(tcp_pull.TcpPull, "_pulled", counted)
    mp.setattr(tcp_pull.TcpPull, "set_result", python_path)
    mp.setattr(tcp_pull, "PULL_DELAY_ON_ERROR_S", 0.002)
    mp.setattr(tcp_pull, "FLOW_CONTROL_DELAY_S", 0.002)
    try:
        return asyncio.run(go()), taken[0]
    finally:
        mp.undo()


def test_c_and_python_give_a_chain_the_same_pulls_messages_and_offsets(store_root):
    b = _bodies(store_root)
    T = b["T"]
    script = [
        lambda o, off: answer(o, body=T[0], nxt=1),                                  # steady: C
        lambda o, off: answer(o, body=T[1], nxt=2),                                  # steady: C
        lambda o, off: answer(o, code=ResponseCode.PULL_NOT_FOUND, nxt=2, remark="OFFSET_FOUND_NULL"),
        lambda o, off: answer(o, body=b["T2"], nxt=5),                               # two records: C
        lambda o, off: answer(o, code=ResponseCode.PULL_RETRY_IMMEDIATELY, nxt=6, remark="NO_MATCHED_MESSAGE"),
        lambda o, off: answer(o, body=T[6], nxt=7, binary=True),                     # binary header: Python
        lambda o, off: answer(o, code=ResponseCode.PULL_OFFSET_MOVED, nxt=7, remark="OFFSET_TOO_SMALL"),
        lambda o, off: answer(o, body=T[7], nxt=8, ext={"nextBeginOffset": "8", "suggestWhichBrokerId": "0",
                                                        "nextBeginOffset": " 8"}),  # int(" 8"): Python
        lambda o, off: answer(o, body=b["Z"], nxt=9),                                # compressed: Python
        lambda o, off: answer(o, body=T[8], nxt=9, ext={"nextBeginOffset": "9"}),    # no suggest: Python
        lambda o, off: answer(o + 1000, body=T[0], nxt=1) + answer(o, body=T[2], nxt=10),  # unknown opaque first
        lambda o, off: answer(o, code=ResponseCode.SUBSCRIPTION_NOT_LATEST, remark="not latest"),  # error: ends
        lambda o, off: answer(o, body=T[3], nxt=11, suggest=1),                      # a slave suggested: C, ends
        lambda o, off: answer(o, body=T[4], nxt=12),                                 # (asked of the slave)
    ]
    for chunk in (None, 7, 100):
        py, none = run_chain(None, "T", script, chunk)
        c, taken = run_chain(answers, "T", script, chunk)
        assert c == py
        assert none == 0 and taken == 6  # steps 1, 2, 4, 11, 13, 14
        delivered = [e[1] for e in c if e[0] == "deliver"]
        assert [m[8] for d in delivered for m in d] == [0, 1, 3, 4, 6, 7, 0, 8, 2, 3, 4]  # queue offsets
        assert [m[0] for d in delivered for m in d] == ["T"] * 6 + ["Z"] + ["T"] * 4
        assert ("end", 0.002) in c and ("end", 0.0) in c  # the error (its delay, as set), the slave
        assert ("offset", 7, False) in c  # OFFSET_MOVED
        pulls = [e[1] for e in c if e[0] == "pull"]
        assert pulls == [0, 1, 2, 2, 5, 6, 7, 7, 8, 9, 9, 10, 10, 11]


def test_a_retry_queue_and_a_stopped_chains_answer_are_pythons(store_root):
    b = _bodies(store_root)
    script = [lambda o, off: answer(o, body=b["R"], nxt=1),       # a retry queue: Python shows topic T
              lambda o, off: answer(o, body=b["R"], nxt=2)]
    py, _ = run_chain(None, "%RETRY%g", script)
    c, taken = run_chain(answers, "%RETRY%g", script)
    assert c == py and taken == 0
    assert [e[1][0][0] for e in c if e[0] == "deliver"] == ["T", "T"]

    async def late():
        # the answer of a chain stopped while its pull was in flight is dropped, not delivered
        conn = Connection({}, Limits())
        conn.fast = answers
        conn.connection_made(_Transport())
        core = Core("T", conn)
        puller = tcp_pull.TcpPull(core, ProcessQueue(MessageQueue("T", BROKER, 0), 0))
        conn._pending[5] = puller  # stopped: its _opaque is 0
        frame = answer(5, body=_bodies_t0, nxt=1)
        assert answers(conn, frame, 0) == (0, None, True)  # not taken: Python drops it
        conn.data_received(frame)
        assert core.log == [] and conn._pending == {}
    _bodies_t0 = b["T"][0]
    asyncio.run(late())


def test_the_hook_takes_a_run_of_pull_and_send_answers_and_stops_at_the_first_it_does_not(store_root):
    b = _bodies(store_root)

    async def go():
        conn = Connection({}, Limits())
        conn.connection_made(_Transport())
        pulls = []
        for o in (1, 2, 3):
            core = Core("T", conn)
            p = tcp_pull.TcpPull(core, ProcessQueue(MessageQueue("T", BROKER, 0), 0))
            p._opaque, p._conn, p._addr = o, None, None  # in flight; no connection to pull again on
            conn._pending[o] = p
            pulls.append((p, core))
        ok = answer(1, body=b["T"][0], nxt=1) + answer(2, body=b["T2"], nxt=5)
        data = ok + answer(3, code=ResponseCode.PULL_NOT_FOUND) + answer(4)[:10]
        assert answers(conn, data, 0) == (len(ok), None, True)
        assert sorted(conn._pending) == [3]
        assert [[m[8] for m in e[1]] for _, core in pulls for e in core.log if e[0] == "deliver"] == [[0], [3, 4]]
        assert [p.pq.next_offset for p, _ in pulls] == [1, 5, 0]
    asyncio.run(go())


def test_bind_pull_refuses_a_class_whose_fields_are_not_slots():
    class NoSlots:
        pass
    with pytest.raises(TypeError):
        _answer.bind_pull(NoSlots)
    _answer.bind_pull(tcp_pull.TcpPull)
