"""The worker's C path for PULL_MESSAGE (processors/pull_fast.py, native/remoting_pull.c) against
the Python path it short-cuts (pull.py): the same frames, fed to a worker connection with and
without it, must leave the same bytes on the wire in the same order (records' time stamps
aside: the two stores are written at different times), the same committed offsets and the same
counters, whether the pull is found, held and then answered, timed out, committed or handed
back; a closed connection's held pulls are dropped."""
from __future__ import annotations

import asyncio
import json
import random
import time

import pytest

from shmq.broker.worker import dispatch
from shmq.broker.worker.pull_hold import PullHolds
from shmq.message.layout import R_BORNTS, R_STORETS
from shmq.protocol import FLAG_ONEWAY, RequestCode
from shmq.protocol.bodies import SubscriptionData, TopicConfig
from shmq.protocol.command import RemotingCommand, encode_command
from shmq.protocol.transport import Connection, Limits
from shmq.store import SYNC_FLUSH, MessageStore

from ..conftest import small_config

from .test_send_fast import _send, _Transport, _Worker, mutate_headers

SUSPEND, SUB, COMMIT = 2, 4, 1


def _pull(opaque, offset, qid=0, flags=SUSPEND | SUB | COMMIT, commit=0, nums=32, suspend_ms=15000, sub="*",
          expr="TAG", subver=1, group="G", topic="T", code=RequestCode.PULL_MESSAGE, oneway=False):
    ext = {"consumerGroup": group, "topic": topic, "queueId": str(qid), "queueOffset": str(offset),
           "maxMsgNums": str(nums), "sysFlag": str(flags), "commitOffset": str(commit),
           "suspendTimeoutMillis": str(suspend_ms), "subVersion": str(subver)}
    if sub is not None:
        ext["subscription"] = sub
    if expr is not None:
        ext["expressionType"] = expr
    cmd = RemotingCommand(code=code, opaque=opaque, ext_fields=ext, flag=FLAG_ONEWAY if oneway else 0)
    return encode_command(cmd)


class _PullWorker(_Worker):
    """A worker with real held pulls and a group "G" whose cached heartbeat subscription to T is
    "*" (version 5); "F" is subscribed to tag a only."""

    def __init__(self, root, loop, **topic):
        super().__init__(root)
        self.holds = PullHolds(self.store, loop)
        self.topics.table["T"] = TopicConfig(topicName="T", readQueueNums=4, writeQueueNums=4, perm=6, **topic)
        self.subs = {("G", "T"): SubscriptionData(topic="T", subString="*", subVersion=5, expressionType="TAG"),
                     ("F", "T"): SubscriptionData(topic="T", subString="a", subVersion=5, expressionType="TAG")}
        self.until = time.monotonic() + 3600.0

    def cached_subscription(self, group, topic):
        return self.subs.get((group, topic)) if self.until >= time.monotonic() else None

    def cached_subscription_until(self, group, topic):
        return self.until

    async def fetch_subscription(self, group, topic):
        return None

    def close(self):
        self.holds.close()
        self.store.close()


def _normal(out: bytes) -> list[tuple[bytes, bytes]]:
    """The frames of ``out`` as (header, body), each record of a body with its born and store
    time stamps zeroed."""
    frames, pos = [], 0
    while pos < len(out):
        end = pos + 4 + int.from_bytes(out[pos:pos + 4], "big")
        hl = int.from_bytes(out[pos + 4:pos + 8], "big") & 0xFFFFFF
        header, body = out[pos + 8:pos + 8 + hl], bytearray(out[pos + 8 + hl:end])
        at = 0
        while at + 64 <= len(body):
            size = int.from_bytes(body[at:at + 4], "big")
            body[at + R_BORNTS:at + R_BORNTS + 8] = bytes(8)
            body[at + R_STORETS:at + R_STORETS + 8] = bytes(8)
            at += size
        frames.append((header, bytes(body)))
        pos = end
    return frames


class _SyncPullWorker(_PullWorker):
    """The same over a SYNC_FLUSH store: a send's answer waits for its flush, a pull's does not."""

    def __init__(self, root, loop, **topic):
        super().__init__(root, loop, **topic)
        self.holds.close()
        self.store.close()
        self.store = MessageStore.open(small_config(root, flush_disk_type=SYNC_FLUSH))
        self.pipeline = type(self.pipeline)(self.store, "TestCluster")
        self.holds = PullHolds(self.store, loop)


async def _run(root, fast: bool, steps, worker=_PullWorker, **topic):
    """``steps``: bytes (a read of the one connection), ("put", qid, n) (another process's
    appends, then the loop's check), ("sleep", s), "close" (the connection goes away), or a
    callable of the worker. Returns the wire, stats, committed offsets and the bytes the C path took."""
    w = worker(root, asyncio.get_running_loop(), **topic)
    handlers, fp = dispatch.build(w, pull_fast=fast)
    t = _Transport()
    conn = Connection(handlers, Limits())
    taken = [0]

    def counting(conn, data, pos):
        r = fp(conn, data, pos)
        taken[0] += r[0] - pos
        return r

    conn.fast = counting
    conn.connection_made(t)
    try:
        for step in steps:
            if isinstance(step, bytes):
                conn.data_received(step)
            elif step == "close":
                t.closing = True
                conn.connection_lost(None)
            elif callable(step):
                step(w)
            elif step[0] == "put":
                for _ in range(step[2]):
                    w.store.put("T", step[1], b"m" * 40, {"TAGS": "a"})
                w.holds.check()
            elif step[0] == "sleep":
                await asyncio.sleep(step[1])
            await asyncio.sleep(0)
        for _ in range(5):
            await asyncio.sleep(0.001)
        conn._flush()
        offsets = {(g, q): w.store.query_offset(g, "T", q) for g in ("G", "F") for q in range(4)}
        return _normal(bytes(t.out)), dict(w.stats), offsets, len(w.holds), taken[0]
    finally:
        w.close()


def _compare(tmp_path, steps, name, worker=_PullWorker, **topic):
    py = asyncio.run(_run(tmp_path / f"{name}-py", False, steps, worker, **topic))
    c = asyncio.run(_run(tmp_path / f"{name}-c", True, steps, worker, **topic))
    for i, (a, b) in enumerate(zip(py[0], c[0])):
        assert a == b, (i, a[0], b[0])
    assert len(py[0]) == len(c[0])
    assert py[1:4] == c[1:4]
    return c


def test_found_held_answered_and_committed_as_the_python_path(tmp_path):
    by_c = [_pull(2, 2, nums=2, commit=2),                # found by C, committed
            _pull(3, 4, commit=4), _pull(4, 5, commit=5),  # found, then caught up: held by C
            _pull(6, 7, flags=SUSPEND | COMMIT, subver=4, commit=7),  # the cached subscription: C, held
            _pull(8, 1, nums=0, commit=1), _pull(9, 0, nums=99, commit=7, code=RequestCode.LITE_PULL_MESSAGE)]
    steps = [("put", 0, 5),
             _pull(1, 0, nums=2),                         # learnt by the Python path, and its commit word
             by_c[0], by_c[1] + by_c[2],
             ("put", 0, 1),                                # answered from the wake-up, by one C call
             _pull(5, 6, flags=SUSPEND | COMMIT, subver=5, commit=6),  # the cached subscription: Python learns
             ("put", 0, 1),
             by_c[3],
             ("put", 0, 2),
             _pull(7, 9, flags=SUB | COMMIT, commit=9),   # caught up, no suspend: NOT_FOUND, Python's
             by_c[4] + by_c[5]]
    c = _compare(tmp_path, steps, "cycle")
    frames, stats, offsets, held, taken = c
    assert taken == sum(map(len, by_c)) and held == 0 and offsets[("G", 0)] == 7  # the last commit asked
    assert [json.loads(h)["code"] for h, _ in frames].count(0) == 8


def test_held_pulls_time_out_close_and_shut_down_as_the_python_path(tmp_path):
    steps = [("put", 1, 2), _pull(1, 0, qid=1), _pull(2, 2, qid=1, suspend_ms=50),  # held 50 ms
             ("sleep", 0.2),                             # the sweep answers it: NOT_FOUND, OFFSET_OVERFLOW_ONE
             _pull(4, 2, qid=1, suspend_ms=30000),
             lambda w: w.holds.release_all()]             # shutdown answers it (one: their order is the set's)
    frames = _compare(tmp_path, steps, "timeout")[0]
    assert [json.loads(h)["code"] for h, _ in frames] == [0, 19, 19]

    gone = [("put", 2, 1), _pull(1, 0, qid=2), _pull(2, 1, qid=2), "close", ("put", 2, 1)]
    c = _compare(tmp_path, gone, "closed")
    assert c[3] == 0 and len(c[0]) == 1  # the closed connection's hold dropped, never answered


def test_frames_it_must_not_take_go_to_the_python_path_in_order(tmp_path):
    steps = [("put", 0, 40), ("put", 3, 3),
             _pull(1, 0, nums=1), _pull(2, 0, nums=1, qid=3),
             b"".join([_pull(3, 1, nums=1), _pull(4, 2, nums=1, sub="a"),     # a filter: Python's
                       _pull(5, 3, nums=1, oneway=True),                      # oneway: Python's
                       _pull(6, 3, nums=1, expr="SQL92", sub="a > 1"),       # SQL92 refused by Python
                       _pull(7, 3, nums=1, sub=" * "), _pull(8, 4, nums=1, expr="tag"),
                       _pull(9, 5, nums=1, flags=SUSPEND | COMMIT, subver=9),  # newer than the cached one
                       _pull(10, 5, nums=1, flags=SUSPEND | COMMIT, group="F", subver=1),  # tag a: Python's
                       _pull(11, 99, qid=3), _pull(12, 1, qid=4), _pull(13, 0, topic="U"),  # out of range
                       _send(14, qid=0), _pull(15, 6, nums=3), _pull(16, 3, qid=3)]),
             ("put", 3, 1)]
    c = _compare(tmp_path, steps, "mixed")
    assert c[4] > 0


def test_a_changed_topic_or_subscription_hands_the_pull_back(tmp_path):
    def shrink(w):
        w.topics.table["T"] = TopicConfig(topicName="T", readQueueNums=1, writeQueueNums=1, perm=6)

    def refilter(w):
        w.subs[("G", "T")] = SubscriptionData(topic="T", subString="b", subVersion=5, expressionType="TAG")
        w.sub_epoch += 1

    steps = [("put", 0, 3), ("put", 1, 3), _pull(1, 0, qid=1, nums=1), _pull(2, 1, qid=1, nums=1), shrink,
             _pull(3, 2, qid=1, nums=1),                     # queue 1 is illegal now
             _pull(4, 0, nums=1, flags=SUSPEND, subver=5), _pull(5, 1, nums=1, flags=SUSPEND, subver=5), refilter,
             _pull(6, 2, nums=1, flags=SUSPEND, subver=5)]  # now filtered by tag b: nothing matches
    frames = _compare(tmp_path, steps, "changed")[0]
    assert b"is illegal" in frames[2][0]


def test_sync_flush_pull_answers_do_not_wait_for_the_sends_flush(tmp_path):
    """Under SYNC_FLUSH one C run is sends or pulls, not both: a pull's answer leaves in its read
    and a send's after its flush, in the Python path's order."""
    flushed = ("sleep", 0.2)  # the sends' answers out before the next read (the flusher's timing is its own)
    steps = [("put", 0, 3), _pull(1, 0, nums=1), _pull(2, 1, nums=1), _send(3, qid=0), _send(4, qid=0), flushed,
             _send(5, qid=0) + _pull(6, 3, nums=1) + _pull(7, 2, nums=1) + _send(8, qid=0) + _pull(9, 4, nums=1),
             flushed, _pull(10, 7), _send(11, qid=0), flushed]
    frames, _, _, held, taken = _compare(tmp_path, steps, "sync", _SyncPullWorker)
    assert taken > 0 and held == 0
    assert [json.loads(h)["opaque"] for h, _ in frames][-7:] == [6, 7, 9, 5, 8, 10, 11]


def test_a_read_across_files_and_the_first_of_a_new_file(tmp_path):
    # 100 entries per ConsumeQueue file, 64 KiB CommitLog files: reads stop at both and the Python
    # path maps the next file, after which C reads it
    steps = [("put", 0, 150), _pull(1, 0)] + [_pull(2 + i, 32 * i + 1, nums=32) for i in range(5)] + \
            [_pull(10, 150), ("put", 0, 60), _pull(11, 151), _pull(12, 183), _pull(13, 200)]
    c = _compare(tmp_path, steps, "files")
    assert c[4] > 0


def _mutants(n, seed):
    rnd = random.Random(seed)
    base = [_pull(100, 1, nums=1), _pull(101, 3, qid=1, flags=SUSPEND | COMMIT, subver=5, commit=2),
            _pull(102, 2, nums=2, commit=1), _pull(103, 5, qid=1, suspend_ms=40)]
    return mutate_headers(base, n, rnd)


def _serve_each(root, fast, frames):
    """Each frame on a connection of its own after the learning ones (a bad one closes its own)."""
    async def main():
        w = _PullWorker(root, asyncio.get_running_loop())
        for q in range(2):
            for _ in range(5):
                w.store.put("T", q, b"m", {"TAGS": "a"})
        handlers, fp = dispatch.build(w, pull_fast=fast)
        seen, conns, taken = [], [], [0]

        def counting(conn, data, pos):
            r = fp(conn, data, pos)
            taken[0] += r[0] > pos
            return r

        try:
            for f in [_pull(1, 0, commit=1), _pull(2, 0, qid=1, flags=SUSPEND | COMMIT, subver=5, commit=1),
                      _pull(3, 1, qid=1, commit=1)] + frames:
                t = _Transport()
                conn = Connection(handlers, Limits())
                conn.fast = counting
                conn.connection_made(t)
                conn.data_received(f)
                await asyncio.sleep(0)
                conns.append((conn, t))
            await asyncio.sleep(0.1)  # the 40 ms holds time out
            w.holds.release_all()
            for conn, t in conns:
                conn._flush()
                seen.append((_normal(bytes(t.out)), t.closing))
            return seen, dict(w.stats), {q: w.store.query_offset("G", "T", q) for q in range(4)}, taken[0]
        finally:
            w.close()

    return asyncio.run(main())


@pytest.mark.parametrize("seed", [7, 8])
def test_mutated_pull_headers_get_the_python_paths_answer(tmp_path, seed):
    frames = _mutants(200, seed)
    py = _serve_each(tmp_path / "py", False, frames)
    c = _serve_each(tmp_path / "c", True, frames)
    for i, (a, b) in enumerate(zip(py[0], c[0])):
        assert a == b, (i, frames[i - 3] if i >= 3 else None)
    assert py[1:3] == c[1:3] and py[3] == 0
    assert sum(closing for _, closing in py[0]) > 10  # many damaged headers do not parse at all
    assert c[3] > 15, c[3]  # and many damaged ones are still pulls the C path takes
