"""The worker's C path for plain sends (processors/send_fast.py, native/remoting_send.c) against
the Python path it short-cuts: the same frames, fed to a worker connection with and without it,
must leave byte-identical stores (store timestamps aside) and byte-identical answers on the wire,
whatever the mix of frames it takes and frames it hands back, however the reads split them."""
from __future__ import annotations

import asyncio
import glob
import os
import random

import pytest

from shmq.broker.shared.config import BrokerConfig
from shmq.broker.shared.topics import TopicTable
from shmq.broker.worker import dispatch
from shmq.message.layout import BLANK_MAGIC, R_MAGIC, R_STORETS
from shmq.message.properties import encode_properties
from shmq.message.record import iter_records
from shmq.protocol import FLAG_ONEWAY, RequestCode
from shmq.protocol.bodies import TopicConfig
from shmq.protocol.command import RemotingCommand, encode_command, request
from shmq.protocol.headers import send_v2_ext
from shmq.protocol.transport import Connection, Limits
from shmq.store import MessageStore
from shmq.store.put import PutPipeline
from shmq.store.queue_files import prepare_first

from ..conftest import small_config

PEER = ("10.0.0.7", 4321)


class _Transport:
    def __init__(self):
        self.out = bytearray()
        self.closing = False

    def get_extra_info(self, name, default=None):
        return PEER if name == "peername" else ("127.0.0.1", 10911)

    def write(self, data):
        self.out += data

    def writelines(self, parts):
        for p in parts:
            self.out += p

    def is_closing(self):
        return self.closing

    def close(self):
        self.closing = True

    abort = close

    def pause_reading(self):
        pass

    def resume_reading(self):
        pass


class _Holds:
    def __init__(self):
        self.calls = 0

    def appended(self):
        self.calls += 1

    def appended_in_read(self, conn, answers):
        self.calls += 1
        return False  # nothing held: the transport writes the answers


class _Worker:
    """What the send processor reads of a worker (context.py), over one store."""

    def __init__(self, root):
        self.cfg = BrokerConfig()
        self.wid = 0
        self.boot_ms = 0
        self.stats = {"put": 0, "get": 0}
        self.topics = TopicTable(None)
        self.topics.table["T"] = TopicConfig(topicName="T", readQueueNums=4, writeQueueNums=4, perm=6)
        self.store = MessageStore.open(small_config(root))
        self.pipeline = PutPipeline(self.store, "TestCluster")
        self.holds = _Holds()
        self.ctl = None
        self.sub_epoch = 0

    async def fetch_topic(self, topic):
        return None

    async def auto_create_topic(self, *a):
        return None


def _send(opaque, qid=1, topic="T", body=b"x" * 100, props=None, oneway=False, sysflag=0):
    props = {"UNIQ_KEY": f"ID{opaque:04d}", "WAIT": "true", "TAGS": "a"} if props is None else props
    cmd = request(RequestCode.SEND_MESSAGE_V2, send_v2_ext("pg", topic, "TBW102", 4, qid, sysflag, 1700000000000 + opaque,
                                                           0, encode_properties(props), False), body)
    cmd.opaque = opaque
    if oneway:
        cmd.flag |= FLAG_ONEWAY
    return encode_command(cmd)


def _java_json(opaque, qid=2):
    """A header as a Java client lays it out: its own key order, spaces, a null remark, the
    properties' separators escaped as \\u0001 / \\u0002."""
    ext = ('"a":"pg", "b":"T","c":"TBW102","d":"4","e":"%d","f":"0","g":"1700000000123","h":"0",'
           '"i":"KEYS\\u0001k1 k2\\u0002UNIQ_KEY\\u0001J%d\\u0002WAIT\\u0001true\\u0002CLUSTER\\u0001X\\u0002",'
           '"j":"0","k":"false","m":"false"' % (qid, opaque))
    header = ('{ "code":310, "language":"JAVA", "version":373, "opaque":%d, "flag":0, "remark":null,'
              ' "extFields":{%s}, "serializeTypeCurrentRPC":"JSON" }' % (opaque, ext)).encode()
    body = b"java body"
    return (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body


def _frames():
    """Plain sends the C path takes, between frames it hands back."""
    return [
        _send(1), _send(2), _send(3, qid=3), _send(4, qid=3),             # learnt by the first of each queue
        _send(5, props={"DELAY": "2", "UNIQ_KEY": "D5"}),                  # delayed: Python's
        _send(6), _send(7, oneway=True), _send(8, props={}),               # oneway, no properties
        _send(9, body=b"z" * (16 * 1024 + 1)),                             # too large: Python's error
        _send(10, qid=7),                                                  # queue id out of range
        _send(11, topic="Unknown"),                                        # not a known topic
        _send(12, sysflag=8),                                              # a commit: Python's
        _send(13, props={"u": "\u00e9t\u00e9", "UNIQ_KEY": "U13"}),        # non-ASCII: Python's
        _send(14, props={"CLUSTER": "Other", "X": "1"}), _java_json(15), _java_json(16),
        encode_command(RemotingCommand(code=RequestCode.GET_ROUTEINFO_BY_TOPIC, opaque=17)),
        _send(18, qid=2), _send(19, qid=2, oneway=True), _send(20),
    ]


def _serve(root, fast: bool, chunks, prepared=False, topics=None):
    async def main():
        w = _Worker(root)
        w.topics.table.update(topics or {})
        if prepared:  # the ConsumeQueue files made ahead, as the broker's preparer does (queue_files.py)
            for name, tc in w.topics.table.items():
                prepare_first(w.store.cfg, name, range(tc.writeQueueNums))
        handlers, fp = dispatch.build(w)
        t = _Transport()
        conn = Connection(handlers, Limits())
        taken = [0]

        def counting(conn, data, pos):
            before = w.stats["put"]
            r = fp(conn, data, pos)
            taken[0] += w.stats["put"] - before
            return r

        conn.fast = counting if fast else None
        conn.connection_made(t)
        for c in chunks:
            conn.data_received(c)
            await asyncio.sleep(0)
        for _ in range(20):  # the tasks of sends that asked the (absent) supervisor
            await asyncio.sleep(0.001)
        conn._flush()
        out = (bytes(t.out), t.closing, dict(w.stats), w.holds.calls > 0, w.store.commit_pos)
        w.store.close()
        return out, taken[0]

    return asyncio.run(main())


def _records(root):
    """Every record of the store's CommitLog files, its store timestamp zeroed."""
    out = []
    for f in sorted(glob.glob(os.path.join(root, "commitlog", "*"))):
        with open(f, "rb") as fh:
            data = fh.read()
        pos = 0
        while pos + 8 <= len(data):
            size = int.from_bytes(data[pos:pos + 4], "big")
            if size == 0 or int.from_bytes(data[pos + R_MAGIC:pos + R_MAGIC + 4], "big") == BLANK_MAGIC:
                break  # the end of what was written, or the filler at the end of a file
            (m,) = iter_records(data[pos:pos + size])
            raw = bytearray(m.raw)
            raw[R_STORETS:R_STORETS + 8] = bytes(8)
            out.append(bytes(raw))
            pos += size
    return out


def _compare(tmp_path, chunks, name, prepared=False, topics=None):
    py, none = _serve(tmp_path / f"{name}-py", False, chunks, prepared, topics)
    c, taken = _serve(tmp_path / f"{name}-c", True, chunks, prepared, topics)
    assert c[0] == py[0]  # the answers, byte for byte, in the same order
    assert c[1:] == py[1:]
    assert _records(tmp_path / f"{name}-c") == _records(tmp_path / f"{name}-py")
    return py, taken


def test_c_path_stores_and_answers_what_the_python_path_does(tmp_path):
    frames = _frames()
    (out, closing, stats, woke, _), taken = _compare(tmp_path, [b"".join(frames)], "one-read")
    assert not closing and woke
    # stored: all sends but 9 (too large), 10 (no such queue), 11 (unknown topic); the Python path
    # counts 9 too (it counts before the append refuses it), and so the same here
    assert stats["put"] == 17
    # by C: the second and later plain sends of each queue (2, 4, 6-8, 14, 16, 18-20); the rest by Python
    assert taken == 10
    assert out.count(b'"code":0,') == 14 and b'"code":13,' in out and b'"code":17,' in out


def test_the_first_send_to_each_other_queue_of_a_served_topic_is_taken_by_c(tmp_path):
    """issue 16: once the Python path has served one queue of a topic, the first send to each of
    its other queues is served by C (learnt there, its slot made), not by a trip through send.py
    per new queue; what is stored and answered is the Python path's, and a queue id out of the
    topic's range or an unknown topic are still Python's."""
    frames = [_send(1, qid=1)] + [_send(2 + q, qid=q) for q in (0, 2, 3)] + [
        _send(6, qid=4), _send(8, topic="Unknown"), _send(9, qid=2, oneway=True), _send(10, qid=0)]
    (out, closing, stats, _, _), taken = _compare(tmp_path, [b"".join(frames)], "siblings", prepared=True)
    assert not closing and stats["put"] == 6  # all but 6 (queue 4 of 4) and 8 (unknown topic)
    assert taken == 5  # 2, 3, 4 (each queue's first), 9, 10; 1 by Python
    assert out.count(b'"code":0,') == 5 and b"queueId[4] is illegal" in out and b'"code":17,' in out


def test_a_changed_topic_is_not_served_from_its_old_queue_count(tmp_path):
    """A topic's entry is the TopicConfig it was learnt under: after the table changes (here the
    topic shrinks to 2 queues), the first send to its queue 3 is the Python path's refusal."""
    async def main():
        w = _Worker(tmp_path / "t")
        prepare_first(w.store.cfg, "T", range(4))
        handlers, fp = dispatch.build(w)
        t = _Transport()
        conn = Connection(handlers, Limits())
        conn.fast = fp
        conn.connection_made(t)
        conn.data_received(_send(1, qid=1))  # the Python path: learns T:1 and T's queues
        assert fp(conn, _send(5, qid=-1), 0)[0] == 0  # the broker picks the queue: Python's
        w.topics.table["T"] = TopicConfig(topicName="T", readQueueNums=2, writeQueueNums=2, perm=6)
        n = len(t.out)
        taken = fp(conn, _send(2, qid=3), 0)[0]  # handed back (0 bytes taken) ...
        conn.data_received(_send(2, qid=3))  # ... and refused by the Python path
        answer = t.out[n:]
        w.store.close()
        return taken, answer, w.stats["put"]

    taken, answer, puts = asyncio.run(main())
    assert taken == 0 and puts == 1 and b"queueId[3] is illegal" in answer


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_any_split_of_the_reads_gives_the_same(tmp_path, seed):
    data = b"".join(_frames())
    rnd = random.Random(seed)
    cuts = sorted(rnd.sample(range(1, len(data)), 40))
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    assert _compare(tmp_path, chunks, f"split{seed}")[1] > 0


def test_a_malformed_frame_closes_and_nothing_after_it_is_served(tmp_path):
    bad_header = b'{"code":310,"extFields":{"a":"pg"'  # cut short: no JSON
    bad = (4 + len(bad_header)).to_bytes(4, "big") + len(bad_header).to_bytes(4, "big") + bad_header
    chunks = [b"".join([_send(1), _send(2), _send(3), bad, _send(4), _send(5)])]
    (out, closing, stats, _, _), taken = _compare(tmp_path, chunks, "bad")
    assert closing and stats["put"] == 3 and taken == 2


def test_a_bad_length_word_closes_after_the_frames_before_it(tmp_path):
    chunks = [b"".join([_send(1), _send(2), _send(3)]) + (2**31 - 1).to_bytes(4, "big") + b"junk"]
    (out, closing, stats, _, _), taken = _compare(tmp_path, chunks, "len")
    assert closing and stats["put"] == 3 and taken == 2 and out.count(b'"code":0,') == 3


def test_a_changed_topic_table_sends_the_frame_back_to_python(tmp_path):
    async def main():
        w = _Worker(tmp_path / "t")
        handlers, fp = dispatch.build(w)
        t = _Transport()
        conn = Connection(handlers, Limits())
        conn.fast = fp
        conn.connection_made(t)
        conn.data_received(_send(1, qid=3) + _send(2, qid=3))  # learnt, then taken by C
        assert w.stats["put"] == 2
        w.topics.table["T"] = TopicConfig(topicName="T", readQueueNums=2, writeQueueNums=2, perm=6)
        n = len(t.out)
        conn.data_received(_send(3, qid=3))
        answer = t.out[n:]
        w.store.close()
        return answer, w.stats["put"]

    answer, puts = asyncio.run(main())
    assert puts == 2 and b"queueId[3] is illegal" in answer


def mutate_headers(base, n, rnd):
    """``n`` frames drawn from ``base`` with 1-3 bytes of their JSON header changed, dropped or
    added, the two length words kept consistent so each reaches the header reader."""
    alphabet = b'0123456789"\\{}[]:,.-+eEu \t\x01\x7f\x80abcdefmnT/'
    out = []
    for _ in range(n):
        f = rnd.choice(base)
        hl = int.from_bytes(f[4:8], "big") & 0xFFFFFF
        header, body = bytearray(f[8:8 + hl]), f[8 + hl:]
        for _ in range(rnd.randint(1, 3)):
            at, op = rnd.randrange(len(header)), rnd.random()
            if op < 0.5:
                header[at] = rnd.choice(alphabet)
            elif op < 0.75 and len(header) > 1:
                del header[at]
            else:
                header.insert(at, rnd.choice(alphabet))
        out.append((4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body)
    return out


def _mutants(n, seed):
    """Valid send frames with 1-3 bytes of their JSON header changed, dropped or added (lengths
    kept consistent, so each reaches the header reader)."""
    rnd = random.Random(seed)
    base = [_send(100, qid=q) for q in range(4)] + [_java_json(101, qid=1), _send(102, props={}),
                                                    _send(103, props={"WAIT": "true", "CLUSTER": "c"}, oneway=True)]
    return mutate_headers(base, n, rnd)


def _serve_each(root, fast: bool, frames):
    """Each frame on a connection of its own (a bad one closes its connection), one store."""
    async def main():
        w = _Worker(root)
        handlers, fp = dispatch.build(w)
        seen, taken = [], [0]

        def counting(conn, data, pos):
            before = w.stats["put"]
            r = fp(conn, data, pos)
            taken[0] += w.stats["put"] - before
            return r

        for f in [_send(1, qid=q) for q in range(4)] + [_java_json(2, qid=1)] + frames:
            t = _Transport()
            conn = Connection(handlers, Limits())
            conn.fast = counting if fast else None
            conn.connection_made(t)
            conn.data_received(f)
            await asyncio.sleep(0)
            conn._flush()
            seen.append((bytes(t.out), t.closing))
        for _ in range(20):
            await asyncio.sleep(0.001)
        out = seen, dict(w.stats), taken[0]
        w.store.close()
        return out

    return asyncio.run(main())


def test_mutated_headers_get_the_python_paths_answer(tmp_path):
    """Whatever the C path takes from a damaged header it must read as Python does, and whatever it
    cannot read it must hand back: the answers, closes and stores are the same either way."""
    frames = _mutants(400, seed=16)
    py = _serve_each(tmp_path / "py", False, frames)
    c = _serve_each(tmp_path / "c", True, frames)
    for i, (a, b) in enumerate(zip(py[0], c[0])):
        assert a == b, (i, frames[i - 5] if i >= 5 else None)
    assert py[1] == c[1] and py[2] == 0
    assert _records(tmp_path / "c") == _records(tmp_path / "py")
    assert sum(closing for _, closing in py[0]) > 50  # many damaged headers do not parse at all
    assert c[2] > 50  # and many damaged ones are still sends the C path takes (a changed digit, a letter)


def test_escaped_properties_with_long_runs_read_as_python_reads_them(tmp_path):
    """The properties text as clients send it: plain runs of 8 bytes and more between \\u0001 /
    \\u0002 escapes, which the header reader copies a run at a time. A raw control byte, a DEL, a
    byte >= 0x80, a quote or a backslash put into a run at any place, before or after an escape,
    gets the Python path's answer, and an untouched text is stored as Python stores it."""
    rnd = random.Random(7)
    base = [_send(200 + q, qid=q, props={"UNIQ_KEY": "U" * (9 + q), "KEYS": "k1 " * (3 + q), "TAGS": "tag-" * q})
            for q in range(4)]
    frames = []
    for i in range(240):
        f = rnd.choice(base)
        hl = int.from_bytes(f[4:8], "big") & 0xFFFFFF
        header, body = bytearray(f[8:8 + hl]), f[8 + hl:]
        start = header.index(b'"i":"') + 5
        end = header.index(b'"', start)
        if i % 6:  # one in six untouched
            header[rnd.randrange(start, end)] = rnd.choice(b"\x01\x1f\x7f\x80\xff\"\\ a")
        frames.append((4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big")
                      + header + body)
    py = _serve_each(tmp_path / "py", False, frames)
    c = _serve_each(tmp_path / "c", True, frames)
    assert py[0] == c[0] and py[1] == c[1]
    assert _records(tmp_path / "c") == _records(tmp_path / "py")
    assert c[2] >= 40  # the untouched ones (and those still valid) by C


def test_a_full_table_starts_again_and_keeps_serving(tmp_path):
    """The C path's queue table is bounded; once full it is cleared rather than left full, so a
    worker that saw many topics come and go still takes the common send."""
    async def main():
        w = _Worker(tmp_path / "full")
        handlers, fp = dispatch.build(w)
        tc = w.topics.table["T"]
        n = 0
        while fp.c.learn(f"gone{n}", 0, tc, 0):  # a table full of queues of deleted topics
            n += 1
        t = _Transport()
        conn = Connection(handlers, Limits())
        conn.fast = fp
        conn.connection_made(t)
        conn.data_received(_send(1))  # the Python path: learns T:1 into a cleared table
        consumed = fp(conn, _send(4), 0)[0]  # served by C: the whole frame taken
        w.store.close()
        return n, consumed, list(fp._learnt), len(_send(4))

    n, consumed, learnt, size = asyncio.run(main())
    # every queue the store's default queue table holds (16,384) is learnt before a clear, but
    # for the one entry of T, learnt ahead of its first send (send_fast.py topics_changed)
    assert n + 1 >= 16384 and learnt == [("T", 1)] and consumed == size


def test_a_held_store_lock_is_waited_for_without_the_gil(tmp_path):
    """The C path tries the store's lock holding the GIL; held by another writer, it waits for it
    with the GIL released (remoting_send.h rs_append): here a Python thread of this process frees
    it meanwhile (it could not, were the GIL held), and the send is then stored and answered."""
    import threading
    import time

    from shmq.native import lib

    async def main():
        w = _Worker(tmp_path / "held")
        handlers, fp = dispatch.build(w)
        t = _Transport()
        conn = Connection(handlers, Limits())
        taken = []

        def counting(conn, data, pos):
            before = w.stats["put"]
            r = fp(conn, data, pos)
            taken.append(w.stats["put"] - before)
            return r

        conn.fast = counting
        conn.connection_made(t)
        conn.data_received(_send(1))  # learnt by the Python path
        for _ in range(5):
            await asyncio.sleep(0.001)
        lock = w.store.cb.ctl.lock
        lock.word = lib.shmq_self_token()  # a live holder: this process, not its writer's append
        freed = []

        def free():
            time.sleep(0.05)
            freed.append(lock.word)
            lock.word = 0

        th = threading.Thread(target=free)
        th.start()
        conn.data_received(_send(2))  # the C path: waits for the lock, the GIL released
        th.join(5)
        conn._flush()
        out = bytes(t.out)
        stats = dict(w.stats)
        w.store.close()
        return out, stats, freed, sum(taken)

    out, stats, freed, taken = asyncio.run(main())
    assert freed and freed[0] != 0  # the lock was still held when the thread freed it
    assert stats["put"] == 2 and out.count(b'"code":0,') == 2
    assert taken == 1  # the second send, by the C path
