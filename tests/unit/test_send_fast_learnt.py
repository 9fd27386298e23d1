"""The worker's C path reads a producer's later SEND_MESSAGE_V2 headers by the layout it learnt
from one it scanned (native/remoting_learnt.c): whatever it reads that way must be what the scan,
and so the Python path, reads. The frames go to a worker connection with the C path and without
it: byte-identical answers and stores (store timestamps aside), with most headers read by a
learnt layout; changed values in the layout's slots are read as the scan reads them, and a byte
changed anywhere else sends the header back to the scan (or to Python)."""
from __future__ import annotations

import asyncio
import random

from shmq.broker.worker import dispatch
from shmq.message.properties import encode_properties
from shmq.protocol import FLAG_ONEWAY, RequestCode
from shmq.protocol.command import encode_command, request
from shmq.protocol.headers import send_v2_ext
from shmq.protocol.transport import Connection, Limits

from .test_send_fast import _java_json, _records, _send, _Transport, _Worker, mutate_headers


def _serve(root, fast: bool, chunks, each: bool):
    """(per connection: the wire's bytes and whether it closed; the stats), and the headers read
    by a layout. ``each``: every chunk on a connection of its own (a damaged frame closes its
    connection), one worker."""
    async def main():
        w = _Worker(root)
        handlers, fp = dispatch.build(w)
        seen, conns = [], []

        def connect():
            t = _Transport()
            conn = Connection(handlers, Limits())
            conn.fast = fp if fast else None
            conn.connection_made(t)
            conns.append((conn, t))
            return conn

        conn = connect()
        for c in chunks:
            if each:
                conn = connect()
            conn.data_received(c)
            await asyncio.sleep(0)
        for _ in range(20):
            await asyncio.sleep(0.001)
        for conn, t in conns:
            conn._flush()
            seen.append((bytes(t.out), t.closing))
        hits = fp.c.learnt_hits if fast else 0
        out = (seen, dict(w.stats))
        w.store.close()
        return out, hits

    return asyncio.run(main())


def _compare(tmp_path, frames, name, chunks=None, each=False):
    chunks = chunks or ([b"".join(frames)] if not each else frames)
    py, _ = _serve(tmp_path / f"{name}-py", False, chunks, each)
    c, hits = _serve(tmp_path / f"{name}-c", True, chunks, each)
    assert c == py  # the answers byte for byte, in order; closes; counts
    assert _records(tmp_path / f"{name}-c") == _records(tmp_path / f"{name}-py")
    return py, hits


def _varied(n, seed):
    """Sends to four queues of T whose slot values vary as a producer's do, and beyond: the
    properties (escapes, long runs, quotes and backslashes escaped, none), born times, flags,
    sysflags, opaques (negative, large, zero), oneway or not."""
    rnd = random.Random(seed)
    out = []
    for i in range(n):
        props = {"UNIQ_KEY": "U%06d" % i + "x" * rnd.randrange(0, 40)}
        if rnd.random() < 0.5:
            props["TAGS"] = rnd.choice(["a", "tag \"q\"", "back\\slash", "t/s", "é"])
        if rnd.random() < 0.2:
            props["KEYS"] = "k1 k2"
        cmd = request(RequestCode.SEND_MESSAGE_V2,
                      send_v2_ext("pg", "T", "TBW102", 4, rnd.randrange(4), rnd.choice([0, 0, 0, 1, 4]),
                                  rnd.choice([1700000000000 + i, 5, 10 ** 17]), rnd.choice([0, 0, 7, -3]),
                                  encode_properties(props), False), b"body %d" % i)
        cmd.opaque = rnd.choice([i + 1, -(i + 1), 2 ** 31 - 1, -(2 ** 31), 0])
        if rnd.random() < 0.3:
            cmd.flag |= FLAG_ONEWAY
        out.append(encode_command(cmd))
    return out


def test_a_producers_headers_are_read_by_the_learnt_layout_as_the_scan_reads_them(tmp_path):
    frames = [_send(1, qid=q) for q in range(4)] + _varied(300, seed=11)
    _, hits = _compare(tmp_path, frames, "varied")
    assert hits > 200  # most after the first of each shape by the layout


def test_any_split_of_the_reads_gives_the_same(tmp_path):
    data = b"".join([_send(1, qid=q) for q in range(4)] + _varied(120, seed=12))
    rnd = random.Random(3)
    cuts = sorted(rnd.sample(range(1, len(data)), 60))
    chunks = [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]
    _, hits = _compare(tmp_path, [], "split", chunks)
    assert hits > 50


def test_bytes_changed_in_and_around_the_slots_get_the_scans_or_pythons_reading(tmp_path):
    """Each frame after a learnt one of its shape, with 1-3 bytes of its header changed, dropped
    or added: in a slot's value (read by the layout as the scan reads it, or refused), next to
    one, or in the bytes between (the layout does not match: the scan, or Python, reads it)."""
    rnd = random.Random(21)
    base = _varied(8, seed=13) + [_java_json(300, qid=1), _java_json(301, qid=2)]
    mutants = mutate_headers(base, 300, rnd)
    # a learnt layout before each mutant: the unchanged base frame it was drawn from comes first
    frames = [_send(1, qid=q) for q in range(4)] + base
    for m in mutants:
        frames += [rnd.choice(base), m]
    py, hits = _compare(tmp_path, frames, "mutants", each=True)
    assert hits > 100
    assert sum(closed for _, closed in py[0]) > 30  # many damaged headers do not parse at all


def test_a_java_clients_layout_is_learnt_too(tmp_path):
    frames = [_java_json(400 + i, qid=1 + i % 2) for i in range(40)]
    _, hits = _compare(tmp_path, frames, "java")
    assert hits >= 30


def _edit(frame: bytes, old: bytes, new: bytes) -> bytes:
    hl = int.from_bytes(frame[4:8], "big") & 0xFFFFFF
    header, body = frame[8:8 + hl], frame[8 + hl:]
    assert old in header
    header = header.replace(old, new, 1)
    return (4 + len(header) + len(body)).to_bytes(4, "big") + len(header).to_bytes(4, "big") + header + body


def test_slot_values_the_scan_refuses_or_reads_otherwise_are_not_taken_by_the_layout(tmp_path):
    """Values in a slot that only the scan's rules decide: an opaque of "-0" (Python answers 0:
    the C path would echo what was written), leading zeros, a fraction or exponent, a number or
    null where the scan wants a string, escapes (a NUL, a surrogate, a bad one)."""
    def base(opaque, qid=1):
        return _send(opaque, qid=qid)

    edits = [(b'"opaque":0,', b'"opaque":-0,', 0), (b'"opaque":7,', b'"opaque":007,', 7),
             (b'"opaque":7,', b'"opaque":7.5,', 7), (b'"opaque":7,', b'"opaque":7e2,', 7),
             (b'"opaque":7,', b'"opaque":-7,', 7), (b'"flag":0,', b'"flag":-0,', 7),
             (b'"f":"0"', b'"f":0', 7), (b'"h":"0"', b'"h":null', 7), (b'"g":"', b'"g":"-', 7),
             (b'UNIQ_KEY', b'UNIQ\\u0000KEY', 7), (b'UNIQ_KEY', b'UNIQ\\ud800KEY', 7), (b'UNIQ_KEY', b'UNIQ\\qKEY', 7),
             (b'UNIQ_KEY', b'UNIQ\\"KEY', 7), (b'"e":"1"', b'"e":"01"', 7), (b'"e":"1"', b'"e":"9"', 7)]
    frames = [base(5), base(6)]  # learnt (the second by the layout)
    for old, new, opaque in edits:
        frames += [base(8), _edit(base(opaque), old, new)]
    _, hits = _compare(tmp_path, frames, "slots", each=True)
    assert hits >= len(edits)


def test_a_producers_batch_headers_are_read_by_a_learnt_layout_too(tmp_path):
    """A SEND_BATCH_MESSAGE the C path stored teaches its header's layout as a plain send's does
    (its code is part of the layout's bytes, so only batches match it): a producer's later
    batches, their queue, born time, opaque and oneway flag varied, plain sends between, are read
    by it and answered and stored as the Python path answers and stores them."""
    from .test_send_fast_batch import _batch, _entries
    frames = [_batch(1 + i, entries=_entries(4, seed=i), qid=i % 4, oneway=i % 5 == 4) for i in range(40)]
    frames += [_send(100 + q, qid=q) for q in range(4)]
    frames += [_batch(200 + i, entries=_entries(3, seed=50 + i), qid=i % 4) for i in range(10)]
    _, hits = _compare(tmp_path, frames, "batches")
    assert hits >= 35  # all but each queue's first (Python's) and the first C one (scanned)
