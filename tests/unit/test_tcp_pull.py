"""A consumer's TCP pull chain (client/tcp_pull.py): the next PULL leaves before the listener
is handed the messages, in offset order; a queue taken away delivers nothing more; a pull the
broker never answers is failed after its timeout and pulled again."""
from __future__ import annotations

import asyncio
from types import SimpleNamespace

from shmq.client import tcp_pull
from shmq.client.consumer_core import ProcessQueue
from shmq.client.message import MessageQueue
from shmq.protocol import RemotingCommand, ResponseCode
from shmq.protocol.bodies import SubscriptionData

MQ = MessageQueue("T", "b", 0)


class FakeConn:
    closed = False

    def __init__(self, log):
        self.log, self.pending, self._n = log, {}, 0

    def start_request(self, cmd, waiter):
        self._n += 1
        cmd.opaque = self._n
        self.pending[self._n] = (waiter, int(cmd.ext_fields["queueOffset"]))
        self.log.append(("pull", int(cmd.ext_fields["queueOffset"])))
        return self._n

    def start_frame(self, build, waiter):
        from shmq.protocol import decode_command
        self._n += 1
        cmd = decode_command(build(self._n)[4:])
        assert cmd.opaque == self._n
        self.pending[self._n] = (waiter, int(cmd.ext_fields["queueOffset"]))
        self.log.append(("pull", int(cmd.ext_fields["queueOffset"])))
        return self._n

    def expire(self, opaques, code, timeout):
        for o in opaques:
            w = self.pending.pop(o, (None,))[0]
            if w is not None and not w.done():
                w.set_exception(TimeoutError("no answer"))

    def answer(self, code=ResponseCode.SUCCESS, n=1):
        """The broker answers the last pull with ``n`` messages from its offset on."""
        opaque = max(self.pending)
        waiter, off = self.pending.pop(opaque)
        resp = RemotingCommand(code=code, opaque=opaque, flag=1, body=b"x" * n,
                               ext_fields={"nextBeginOffset": str(off + (n if code == 0 else 0)),
                                           "suggestWhichBrokerId": "0"})
        if not waiter.done():
            waiter.set_result(resp)


class FakeCore:
    group, model, pull_batch_size, threshold, _running = "G", "CLUSTERING", 32, 1000, True

    def __init__(self, log, suspend_ms=15000):
        self.log = log
        self.suspend_timeout_ms = suspend_ms
        self.subscriptions = {"T": SubscriptionData(topic="T", subString="*", subVersion=1, expressionType="TAG")}
        self._pull_from = {}
        self.offsets = SimpleNamespace(table={}, update=lambda *a, **k: None)
        self.conn = FakeConn(log)
        client = SimpleNamespace(rpc_hook=None)

        async def connect(addr):
            return client, self.conn
        self.instance = SimpleNamespace(read_addr=lambda name, bid: ("127.0.0.1:1", False), connect=connect)

    _gated = False  # ConsumerCore's: _may_pull is asked only when it can answer False
    _filters = {}   # ConsumerCore's: no tag filter (_accept is asked only for a topic with one)

    def _may_pull(self, pq):
        return True

    def _steady_pool(self):  # ConsumerCore's: the C steady path calls _deliver
        return None

    def _accept(self, topic, msgs):
        return msgs

    def commit(self, pq, off):
        pass

    def _deliver(self, pq, msgs):
        self.log.append(("deliver", [m.queue_offset for m in msgs]))


def _records(monkeypatch):
    def decode(body, broker, topic=None, start=[0]):  # one fake message per body byte, offsets counting up
        out = [SimpleNamespace(queue_offset=start[0] + i) for i in range(len(body))]
        start[0] += len(body)
        return out
    monkeypatch.setattr(tcp_pull, "messages_from_records", decode)


def _chain(core, pq):
    async def loop_until_dropped():
        puller = tcp_pull.TcpPull(core, pq)
        while not pq.dropped:
            delay = await puller.run()
            if delay:
                await asyncio.sleep(delay)
    return asyncio.ensure_future(loop_until_dropped())


async def _turns(n=3):
    for _ in range(n):
        await asyncio.sleep(0)


def test_the_next_pull_leaves_before_the_messages_are_delivered(monkeypatch):
    _records(monkeypatch)

    async def body():
        log = []
        core = FakeCore(log)
        task = _chain(core, ProcessQueue(MQ, 0))
        await _turns()
        core.conn.answer(n=2)
        core.conn.answer(ResponseCode.PULL_NOT_FOUND)  # a held pull that timed out empty
        core.conn.answer(n=1)
        task.cancel()
        assert log == [("pull", 0), ("pull", 2), ("deliver", [0, 1]), ("pull", 2), ("pull", 3), ("deliver", [2])]
    asyncio.run(body())


def test_a_queue_taken_away_delivers_nothing_more(monkeypatch):
    _records(monkeypatch)

    async def body():
        log = []
        core = FakeCore(log)
        task = _chain(core, ProcessQueue(MQ, 5))
        await _turns()
        task.cancel()  # the rebalance gave the queue to another consumer
        await _turns()
        core.conn.answer(n=3)  # the answer to the pull in flight arrives late
        assert log == [("pull", 5)]
    asyncio.run(body())


def test_a_pull_never_answered_is_pulled_again_after_its_timeout(monkeypatch):
    _records(monkeypatch)
    monkeypatch.setattr(tcp_pull, "ANSWER_MARGIN_S", 0.05)
    monkeypatch.setattr(tcp_pull, "PULL_DELAY_ON_ERROR_S", 0.01)

    async def body():
        log = []
        core = FakeCore(log, suspend_ms=50)
        pq = ProcessQueue(MQ, 7)
        task = _chain(core, pq)
        for _ in range(300):
            if len(log) >= 2:
                break
            await asyncio.sleep(0.01)
        assert log[:2] == [("pull", 7), ("pull", 7)]
        core.conn.answer(n=1)
        pq.dropped = True
        task.cancel()
        assert log[2:] == [("pull", 8), ("deliver", [0])]
    asyncio.run(body())


def test_the_pull_frame_template_is_the_generic_encoding():
    from shmq.protocol import RequestCode, encode_command, request
    for group, topic, sub in (("G", "T", "*"), ("100%", "T%d", "a || b"), ("G\"\\", "T", "SQL a > 1")):
        fixed = request(RequestCode.PULL_MESSAGE, consumerGroup=group, topic=topic, queueId=3, maxMsgNums=32,
                        suspendTimeoutMillis=15000, subscription=sub, subVersion=17, expressionType="TAG").ext_fields
        pf = tcp_pull.PullFrame.of(fixed)
        for off, flags, commit, opaque in ((0, 6, 0, 1), (123456789012, 7, 123456789000, 2147483647)):
            ext = dict(fixed)
            ext["queueOffset"], ext["sysFlag"], ext["commitOffset"] = str(off), str(flags), str(commit)
            generic = encode_command(RemotingCommand(code=RequestCode.PULL_MESSAGE, ext_fields=ext, opaque=opaque))
            assert pf.frame(off, flags, commit, opaque) == generic
    # a field holding a stand-in: no template (the generic encoding is used)
    fixed = request(RequestCode.PULL_MESSAGE, consumerGroup=tcp_pull._MARK_OFFSET, topic="T").ext_fields
    assert tcp_pull.PullFrame.of(fixed) is None


def test_a_failing_chain_is_started_again(monkeypatch):
    """An unexpected error in a chain (here: the route lookup) is logged and the queue is
    pulled again after the error delay, not left behind."""
    import asyncio as aio

    from shmq.client.consumer_core import ConsumerCore
    _records(monkeypatch)
    monkeypatch.setattr("shmq.client.consumer_core.PULL_DELAY_ON_ERROR_S", 0.01)

    async def body():
        log = []
        core = FakeCore(log)
        calls = [0]
        good = core.instance.read_addr

        def flaky(name, bid):
            calls[0] += 1
            if calls[0] == 1:
                raise RuntimeError("route table in flux")
            return good(name, bid)
        core.instance.read_addr = flaky
        pq = ProcessQueue(MQ, 4)
        task = aio.ensure_future(ConsumerCore._pull_tcp(core, pq))
        for _ in range(200):
            if log:
                break
            await aio.sleep(0.01)
        pq.dropped = True
        task.cancel()
        assert log[:1] == [("pull", 4)]
    asyncio.run(body())


def test_the_c_frame_writer_refuses_what_is_not_a_template():
    import pytest
    from shmq.native import _answer
    pieces, slots = (b"a", b"b", b"c", b"d", b"e"), (3, 0, 1, 2)
    assert _answer.pull_frame(pieces, slots, (10, -6, 0), 123) == b"\0\0\0\x11\0\0\0\x0da123b10c-6d0e"
    for bad in ((pieces[:4], slots, (1, 2, 3), 4), (pieces, slots[:3], (1, 2, 3), 4), (pieces, slots, (1, 2), 4),
                ((b"a", "b", b"c", b"d", b"e"), slots, (1, 2, 3), 4), (pieces, slots, (1, "2", 3), 4)):
        with pytest.raises(TypeError):
            _answer.pull_frame(*bad)
    with pytest.raises(ValueError):
        _answer.pull_frame(pieces, (0, 1, 2, 4), (1, 2, 3), 4)
