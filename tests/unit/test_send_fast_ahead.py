"""A topic of the worker's table is learnt by the C send path when the table arrives
(processors/send_fast.py ``topics_changed``), so a new topic's very first send over TCP is served
by C, not by a trip through send.py (issue 16, topicfirst15). What C stores and answers must be
what the Python path does, and whatever changes in the table between sends (a topic deleted,
recreated with another queue count, made an order topic) is answered as the Python path answers."""
from __future__ import annotations

import asyncio

from shmq.broker.worker import dispatch
from shmq.protocol.bodies import TopicConfig
from shmq.protocol.transport import Connection, Limits
from shmq.store.queue_files import prepare_first

from .test_send_fast import _compare, _send, _Transport, _Worker


def _tc(name, queues=4, order=False):
    return TopicConfig(topicName=name, readQueueNums=queues, writeQueueNums=queues, perm=6, order=order)


def test_a_topics_first_send_is_taken_by_c_with_the_python_paths_answer(tmp_path):
    """T and N are in the table when the worker starts: the first send to each of their queues,
    N's first of all included, is served by C; stores and answers are the Python path's, a
    queue id out of range and an unknown topic are still Python's. (The store's very first
    append, T:1's here, is Python's whatever the topic: it maps the CommitLog's file.)"""
    frames = [_send(1, qid=1), _send(2, topic="N", qid=1), _send(3, topic="N", qid=0), _send(4, qid=3),
              _send(5, topic="N", qid=4), _send(6, topic="Unknown"), _send(7, topic="N", qid=1, oneway=True),
              _send(8, qid=2)]
    (out, closing, stats, _, _), taken = _compare(tmp_path, [b"".join(frames)], "ahead", prepared=True,
                                                  topics={"N": _tc("N")})
    assert not closing and stats["put"] == 6  # all but 5 (queue 4 of 4) and 6 (unknown topic)
    assert taken == 5  # 2 (N's very first), 3, 4, 7, 8; 1 by Python (the CommitLog mapped)
    assert out.count(b'"code":0,') == 5 and b"queueId[4] is illegal" in out and b'"code":17,' in out


class _Conn:
    """A worker with the C path, one connection, and how many puts C served per read."""

    def __init__(self, w):
        self.w = w
        handlers, self.fp = dispatch.build(w)
        self.t = _Transport()
        self.conn = Connection(handlers, Limits())
        self.taken = []

        def counting(conn, data, pos):
            before = w.stats["put"]
            r = self.fp(conn, data, pos)
            self.taken.append(w.stats["put"] - before)
            return r

        self.conn.fast = counting
        self.conn.connection_made(self.t)

    async def send(self, frame) -> tuple[bytes, int]:
        """The answer to ``frame`` and whether C stored it (1) or not (0)."""
        n, k = len(self.t.out), len(self.taken)
        self.conn.data_received(frame)
        for _ in range(5):
            await asyncio.sleep(0.001)
        self.conn._flush()
        return bytes(self.t.out[n:]), sum(self.taken[k:])

    def push(self, table) -> None:
        """A TOPICS_CHANGED: the table replaced, as TopicTable.replace does, and the C path told."""
        self.w.topics.table = table
        self.fp.topics_changed(table)


def test_a_pushed_topic_deleted_recreated_or_changed_between_sends(tmp_path):
    async def main():
        w = _Worker(tmp_path / "t")
        prepare_first(w.store.cfg, "N", range(4))
        c = _Conn(w)
        got = []
        await c.send(_send(0, qid=0))  # the store's first append (Python's: it maps the CommitLog)
        c.push({**w.topics.table, "N": _tc("N")})           # a new topic pushed
        got.append(await c.send(_send(1, topic="N", qid=2)))  # its first send: C
        c.push({k: v for k, v in w.topics.table.items() if k != "N"})  # deleted
        got.append(await c.send(_send(2, topic="N", qid=2)))  # Python: TOPIC_NOT_EXIST
        got.append(await c.send(_send(3, topic="N", qid=1)))  # (a queue C never saw: the same)
        c.push({**w.topics.table, "N": _tc("N", queues=2)})   # recreated with 2 queues
        got.append(await c.send(_send(4, topic="N", qid=3)))  # Python: out of range
        got.append(await c.send(_send(5, topic="N", qid=1)))  # C: in range, first send to N:1
        c.push({**w.topics.table, "N": _tc("N", queues=2, order=True)})  # now an order topic
        got.append(await c.send(_send(6, topic="N", qid=0)))  # Python (not learnt ahead)
        w.store.close()
        return got

    got = asyncio.run(main())
    assert [t for _, t in got] == [1, 0, 0, 0, 1, 0]
    assert [a.count(b'"code":0,') for a, _ in got] == [1, 0, 0, 0, 1, 1]
    assert b'"code":17,' in got[1][0] and b'"code":17,' in got[2][0]
    assert b"queueId[3] is illegal" in got[3][0]


def test_only_topics_whose_sends_pass_the_topic_checks_are_learnt_ahead(tmp_path):
    """An order topic, a %RETRY% topic, a system topic and a name a client may not send to stay
    the Python path's (their own checks and answers); a plain topic is C's from its first send."""
    async def main():
        w = _Worker(tmp_path / "t")
        names = ["Plain", "Ord", "%RETRY%g", "SCHEDULE_TOPIC_XXXX"]
        for n in names:
            prepare_first(w.store.cfg, n, range(2))
        w.topics.table.update({"Plain": _tc("Plain", 2), "Ord": _tc("Ord", 2, order=True),
                               "%RETRY%g": _tc("%RETRY%g", 2), "SCHEDULE_TOPIC_XXXX": _tc("SCHEDULE_TOPIC_XXXX", 2)})
        c = _Conn(w)
        ahead = sorted(c.fp._ahead)
        await c.send(_send(0, qid=0))  # the store's first append (Python's: it maps the CommitLog)
        got = [await c.send(_send(i, topic=n, qid=0)) for i, n in enumerate(names)]
        w.store.close()
        return ahead, got

    ahead, got = asyncio.run(main())
    assert ahead == ["Plain", "T"]
    assert [t for _, t in got] == [1, 0, 0, 0]
    assert b"forbidden" in got[3][0]  # a system topic: send.py's NO_PERMISSION


def test_learning_ahead_is_bounded_and_a_full_table_leaves_first_sends_to_python(tmp_path, monkeypatch):
    """Topics beyond EAGER_TOPICS are learnt by their first send (through Python) as before."""
    from shmq.broker.worker.processors import send_fast
    monkeypatch.setattr(send_fast, "EAGER_TOPICS", 3)

    async def main():
        w = _Worker(tmp_path / "t")
        for i in range(5):
            w.topics.table[f"M{i}"] = _tc(f"M{i}", 1)  # (T first, then these: the table's order)
            prepare_first(w.store.cfg, f"M{i}", range(1))
        c = _Conn(w)
        ahead = set(c.fp._ahead)
        await c.send(_send(0, qid=0))  # the store's first append (Python's: it maps the CommitLog)
        got = [await c.send(_send(10 + i, topic=f"M{i}", qid=0)) for i in range(5)]
        again = [await c.send(_send(20 + i, topic=f"M{i}", qid=0)) for i in range(5)]
        w.store.close()
        return ahead, got, again

    ahead, got, again = asyncio.run(main())
    assert len(ahead) == 3 and "T" in ahead
    assert sum(t for _, t in got) == 2  # M0, M1 learnt ahead (with T), M2-M4 by their first send and all(a.count(b'"code":0,') == 1 for a, _ in got)
    assert [t for _, t in again] == [1] * 5  # the others learnt by their first send
