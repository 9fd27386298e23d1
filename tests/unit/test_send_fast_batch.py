"""The worker's C path for SEND_BATCH_MESSAGE (native/remoting_batch.c, send_fast.py's
learn_batch) against the Python path (send.py's _put_batch): the same frames, fed to a worker
connection with and without the C path, leave byte-identical stores (store timestamps aside) and
byte-identical answers, for batches with keys, tags and properties, batch-level properties texts
learnt and not, damaged bodies (the Python path's MESSAGE_ILLEGAL either way), too-large bodies,
retry topics, oneway batches and batches between plain sends, however the reads split them."""
from __future__ import annotations

import asyncio
import random

import pytest

from shmq.broker.worker import dispatch
from shmq.message.batch import BatchEntry, encode_batch
from shmq.message.properties import encode_properties
from shmq.protocol import FLAG_ONEWAY, RequestCode
from shmq.protocol.bodies import TopicConfig
from shmq.protocol.command import encode_command, request
from shmq.protocol.headers import send_v2_ext
from shmq.protocol.transport import Connection, Limits

from .test_send_fast import _records, _send, _Transport, _Worker, mutate_headers


def _entries(n, tag="a", seed=0, size=100):
    rnd = random.Random(seed)
    out = []
    for k in range(n):
        props = {"UNIQ_KEY": f"U{seed:03d}{k:04d}", "TAGS": f"{tag}{k % 3}", "KEYS": f"k{k} key-{seed}"}
        if k % 4 == 1:
            props["color"] = "blue"
        if k % 5 == 2:
            props = {}  # an entry without properties
        body = bytes(rnd.randrange(256) for _ in range(rnd.randint(0, size)))
        out.append(BatchEntry(body, encode_properties(props) if props else "", k % 7))
    return out


def _batch(opaque, entries=None, qid=1, topic="T", props="", oneway=False, sysflag=0, body=None,
           code=RequestCode.SEND_BATCH_MESSAGE):
    if body is None:
        body = encode_batch(_entries(32, seed=opaque) if entries is None else entries)
    cmd = request(code, send_v2_ext("pg", topic, "TBW102", 4, qid, sysflag, 1700000000000 + opaque, 0, props, True), body)
    cmd.opaque = opaque
    if oneway:
        cmd.flag |= FLAG_ONEWAY
    return encode_command(cmd)


def _damaged(opaque, how, qid=1):
    good = encode_batch(_entries(4, seed=opaque))
    b = bytearray(good)
    if how == "truncated":
        b = b[:-3]
    elif how == "short-tail":
        b += b"\x00" * 10  # fewer bytes than an entry's fixed part after the last entry
    elif how == "negative-body":
        b[16:20] = (-5).to_bytes(4, "big", signed=True)
    elif how == "body-past-end":
        b[16:20] = (len(b) * 2).to_bytes(4, "big")
    elif how == "negative-props":
        blen = int.from_bytes(b[16:20], "big")
        b[20 + blen:22 + blen] = (-1).to_bytes(2, "big", signed=True)
    elif how == "props-past-end":
        blen = int.from_bytes(b[16:20], "big")
        b[20 + blen:22 + blen] = (30000).to_bytes(2, "big")
    elif how == "empty":
        b = bytearray()
    return _batch(opaque, body=bytes(b), qid=qid)


WAIT = "WAIT\x01true\x02"


def _frames():
    big = encode_batch([BatchEntry(b"z" * (16 * 1024 + 1), "", 0)])  # over small_config's max size
    return [
        _batch(1), _batch(2), _batch(3),                              # learnt by the first: 2, 3 by C
        _send(4), _send(5),                                           # plain sends between
        _batch(6, props=WAIT), _batch(7, props=WAIT),                 # a new text: learnt, then C
        _batch(8, props="CLUSTER\x01Other\x02X\x011\x02"), _batch(9, props="CLUSTER\x01Other\x02X\x011\x02"),
        _batch(10, props="DELAY\x012\x02"),                           # MESSAGE_ILLEGAL, both paths
        _batch(11, qid=3), _batch(12, qid=3, oneway=True), _batch(13, qid=3),
        *[_damaged(20 + i, how, qid=3) for i, how in enumerate(
            ["truncated", "short-tail", "negative-body", "body-past-end", "negative-props", "props-past-end", "empty"])],
        _batch(30, body=big), _batch(31, body=big, qid=3),            # too large: Python's error
        _batch(32, qid=7),                                            # no such queue
        _batch(33, topic="%RETRY%g"), _batch(34, topic="%RETRY%g"),   # retry: refused by Python
        _batch(35, sysflag=8), _batch(36, sysflag=4),                 # commit / prepared: Python's
        _batch(37, code=RequestCode.SEND_MESSAGE_V2),                 # a V2 batch: Python's
        _batch(38, entries=_entries(1, seed=38)),                     # one entry
        _batch(39, entries=_entries(90, seed=39, size=20)),           # many entries (two CQ files)
        _batch(40, props="u\x01\u00e9t\u00e9\x02"), _batch(41, props="u\x01\u00e9t\u00e9\x02"),  # raw UTF-8 in the header: Python's
        _batch(45, qid=0, entries=_entries(5, seed=45)), _batch(46, qid=0, entries=_entries(90, seed=46, size=8)),
        _batch(42, qid=2, props=WAIT), _batch(43, qid=2, props=WAIT, oneway=True), _batch(44, qid=2, props=WAIT),
    ]


def _serve(root, fast: bool, chunks):
    async def main():
        w = _Worker(root)
        w.topics.table["%RETRY%g"] = TopicConfig(topicName="%RETRY%g", readQueueNums=4, writeQueueNums=4, perm=6)
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
        for _ in range(20):
            await asyncio.sleep(0.001)
        conn._flush()
        out = (bytes(t.out), t.closing, dict(w.stats), w.store.commit_pos)
        w.store.close()
        return out, taken[0]

    return asyncio.run(main())


def _compare(tmp_path, chunks, name):
    py, _ = _serve(tmp_path / f"{name}-py", False, chunks)
    c, taken = _serve(tmp_path / f"{name}-c", True, chunks)
    assert c[0] == py[0]  # the answers, byte for byte, in the same order
    assert c[1:] == py[1:]
    assert _records(tmp_path / f"{name}-c") == _records(tmp_path / f"{name}-py")
    return py, taken


def test_c_path_stores_and_answers_batches_as_the_python_path_does(tmp_path):
    (out, closing, stats, _), taken = _compare(tmp_path, [b"".join(_frames())], "one-read")
    assert not closing
    # by C: batches 2, 3 (learnt by 1), 7 (WAIT learnt by 6), 9, 12, 13 (queue 3 learnt by 11),
    # 38, 39 (queue 1, text ""), 46 (queue 0), 43, 44, and the plain sends 4, 5 (queue 1 learnt by
    # a batch) but those whose append needs a file mapped (the next 64 KiB CommitLog file, the
    # next 100-entry ConsumeQueue file): the Python path maps it and stores them
    assert taken >= 32 * 6 + 90
    assert out.count(b'"code":13,') >= 1 + 7 + 2  # delayed, damaged, retry (and others): MESSAGE_ILLEGAL
    assert out.count(b'"msgId":"') >= 14


@pytest.mark.parametrize("seed", [1, 2])
def test_any_split_of_the_reads_gives_the_same(tmp_path, seed):
    data = b"".join(_frames())
    rnd = random.Random(seed)
    cuts = sorted(rnd.sample(range(1, len(data)), 60))
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    assert _compare(tmp_path, chunks, f"split{seed}")[1] > 0


def test_damaged_bodies_after_learnt_ones_get_the_python_paths_error(tmp_path):
    """Random damage to learnt batches: whatever the core's batch scan refuses is refused with the
    Python path's MESSAGE_ILLEGAL and stores nothing; whatever it takes is stored and answered alike."""
    rnd = random.Random(16)
    frames = [_batch(1), _batch(2, props=WAIT)]
    for i in range(150):
        b = bytearray(encode_batch(_entries(rnd.randint(1, 6), seed=i, size=30)))
        for _ in range(rnd.randint(1, 3)):
            at = rnd.randrange(len(b))
            b[at] = rnd.randrange(256) if rnd.random() < 0.7 else 0xFF
        if rnd.random() < 0.3:
            b = b[:rnd.randrange(len(b))]
        frames.append(_batch(100 + i, body=bytes(b), props=rnd.choice(["", WAIT])))
    (out, closing, stats, _), taken = _compare(tmp_path, [b"".join(frames)], "mutants")
    assert not closing and taken > 32 and b'"code":13,' in out


def test_sync_flush_batches_answer_as_python_and_only_once_durable(tmp_path):
    """Under SYNC_FLUSH the C path's batch answers wait for the group commit like the Python
    path's: the same bytes, and no SUCCESS leaves before the last record of its batch is flushed."""
    from .test_send_fast_sync import _answers, _record_end, _run
    data = [b"".join(_frames())]
    (py, _, s1), _ = _run(tmp_path / "py", False, data)
    (c, writes, s2), taken = _run(tmp_path / "c", True, data)
    s1.close()
    try:
        assert taken >= 32 * 6 + 90
        assert c == py
        for flushed, chunk in writes:
            for resp in _answers(chunk):
                if resp.code == 0:
                    assert _record_end(s2, resp.ext_fields["msgId"].split(",")[-1]) <= flushed
    finally:
        s2.close()


def test_unflushed_c_path_batches_are_answered_flush_disk_timeout_with_their_ids(tmp_path):
    from .test_send_fast_sync import _answers, _run
    # 16 entries each: all four within the first 100-entry ConsumeQueue file (a map is Python's)
    frames = [_batch(k, entries=_entries(16, seed=k), oneway=k == 3) for k in (1, 2, 3, 4)]
    (out, _, s), taken = _run(tmp_path / "c", True, [frames[0]] + [b"".join(frames[1:])],
                              stop_flusher=True, sync_flush_timeout_ms=200)
    try:
        assert taken == 3 * 16  # 2-4 by C (1 taught it the queue and the text)
        got = list(_answers(out))
        assert [r.opaque for r in got] == [1, 2, 4]
        assert all(r.code == 10 and r.remark == "flush disk timeout" for r in got)
        for r in got:
            ids = r.ext_fields["msgId"].split(",")
            assert len(ids) == 16 and all(s.read_at(int(i[-16:], 16)) is not None for i in ids)
        assert [r.ext_fields["queueOffset"] for r in got] == ["0", "16", "48"]
    finally:
        s.close()


def _header_mutants(n, seed):
    """Learnt batch frames with 1-3 bytes of their JSON header changed, dropped or added (lengths
    kept consistent, so each reaches the header reader)."""
    rnd = random.Random(seed)
    base = [_batch(200 + q, entries=_entries(3, seed=q), qid=q, props=WAIT if q % 2 else "") for q in range(4)]
    base.append(_batch(210, entries=_entries(2, seed=9), qid=1, oneway=True))
    return mutate_headers(base, n, rnd)


def _serve_each(root, fast: bool, frames):
    """Each frame on a connection of its own (a bad one closes its connection), one store; the
    queues and both texts learnt first."""
    async def main():
        w = _Worker(root)
        handlers, fp = dispatch.build(w)
        seen, taken = [], [0]

        def counting(conn, data, pos):
            before = w.stats["put"]
            r = fp(conn, data, pos)
            taken[0] += w.stats["put"] - before
            return r

        learn = [_batch(1, entries=_entries(1, seed=1), qid=q, props=p) for q in range(4) for p in ("", WAIT)]
        for f in learn + frames:
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


def test_mutated_batch_headers_get_the_python_paths_answer(tmp_path):
    """A damaged batch header: what the C path takes it reads as Python does, what it cannot read
    it hands back; the answers, closes and stores are the same either way."""
    frames = _header_mutants(200, seed=32)
    py = _serve_each(tmp_path / "py", False, frames)
    c = _serve_each(tmp_path / "c", True, frames)
    for i, (a, b) in enumerate(zip(py[0], c[0])):
        assert a == b, (i, frames[i - 8] if i >= 8 else None)
    assert py[1] == c[1] and py[2] == 0
    assert _records(tmp_path / "c") == _records(tmp_path / "py")
    assert sum(closing for _, closing in py[0]) > 20
    assert c[2] > 40  # many damaged ones are still batches the C path takes
