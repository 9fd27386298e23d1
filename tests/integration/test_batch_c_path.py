"""The worker's C path for SEND_BATCH_MESSAGE (native/remoting_batch.c) on a real broker: the
answers of a broker with it and one without it (SHMQ_SEND_FAST=0) are the same bytes (but the
store host in the msgIds) for the same batches on one connection, damaged ones included; and a
worker killed with SIGKILL while producers send batches through it loses no acknowledged message."""
from __future__ import annotations

import os
import random
import signal
import socket
import threading
import time

from shmq.errors import RemotingError
from shmq.message.batch import BatchEntry, encode_batch
from shmq.message.properties import encode_properties
from shmq.message.record import iter_records
from shmq.protocol import FLAG_ONEWAY, RequestCode, SyncRemotingClient
from shmq.protocol.command import encode_command, request
from shmq.protocol.headers import send_v2_ext
from shmq.store import StoreConfig
from shmq.store.verify import verify_store

from .broker_helpers import TEST_SETTINGS, create_topic, pull, send, start_broker  # noqa: F401
from .conftest import processes  # noqa: F401


def _entries(n: int, seed: int, tag: str = "t"):
    rnd = random.Random(seed)
    out = []
    for k in range(n):
        props = {"UNIQ_KEY": f"B{seed:04d}{k:04d}", "TAGS": f"{tag}{k % 3}", "KEYS": f"k{k} s{seed}"}
        if k % 4 == 1:
            props["custom"] = f"v{k}"
        out.append(BatchEntry(rnd.randbytes(rnd.randint(1, 120)), encode_properties(props) if k % 6 else "", k % 5))
    return out


def _frame(opaque: int, body: bytes, qid: int = 1, props: str = "", oneway: bool = False,
           code: int = RequestCode.SEND_BATCH_MESSAGE, topic: str = "Batch") -> bytes:
    ext = send_v2_ext("pg", topic, "TBW102", 4, qid, 0, 1700000000000 + opaque, 0, props,
                      code == RequestCode.SEND_BATCH_MESSAGE)
    cmd = request(code, ext, body)
    cmd.opaque = opaque
    if oneway:
        cmd.flag |= FLAG_ONEWAY
    return encode_command(cmd)


def _sequence():
    """(frame, answered) pairs: learnt and unlearnt texts, damaged bodies, oneway, plain sends."""
    wait = "WAIT\x01true\x02"
    good = encode_batch(_entries(4, seed=99))
    cut = good[:-5]
    bad_len = bytearray(good)
    bad_len[16:20] = (10 ** 6).to_bytes(4, "big")
    seq = []
    for i in range(12):
        seq.append((_frame(10 + i, encode_batch(_entries(32, seed=i)), qid=i % 2, props=wait if i % 3 else ""), True))
    seq += [(_frame(30, cut), True), (_frame(31, bytes(bad_len)), True), (_frame(32, b""), True),
            (_frame(33, encode_batch(_entries(32, seed=33)), oneway=True), False),
            (_frame(34, b"plain body", code=RequestCode.SEND_MESSAGE_V2, props="TAGS\x01x\x02"), True),
            (_frame(35, encode_batch(_entries(32, seed=35)), props="DELAY\x013\x02"), True),
            (_frame(36, encode_batch(_entries(32, seed=36)), qid=9), True)]
    seq += [(_frame(40 + i, encode_batch(_entries(32, seed=40 + i))), True) for i in range(6)]
    return seq


def _exchange(addr: str, seq) -> bytes:
    host, port = addr.rsplit(":", 1)
    out = bytearray()
    with socket.create_connection((host, int(port)), timeout=10) as s:
        for frame, answered in seq:
            s.sendall(frame)
            if not answered:
                continue
            head = b""
            while len(head) < 4:
                head += s.recv(4 - len(head))
            n = int.from_bytes(head, "big")
            rest = b""
            while len(rest) < n:
                rest += s.recv(n - len(rest))
            out += head + rest
    return bytes(out)


def test_batch_answers_are_the_same_bytes_with_and_without_the_c_path(start_broker, monkeypatch):
    outs = []
    for fast in ("0", "1"):
        monkeypatch.setenv("SHMQ_SEND_FAST", fast)
        br = start_broker(workers=1)
        with SyncRemotingClient(br.addr) as c:
            assert create_topic(c, "Batch", queues=4).code == 0
        got = _exchange(br.addr, _sequence())
        # the store host (IP and port, the msgIds' first 16 hex digits) is each broker's own
        prefix = got[got.index(b'"msgId":"') + 9:][:16]
        outs.append(got.replace(prefix, b"<store host hex>"))
        assert br.stop(timeout=20) == 0
    assert outs[0] == outs[1]
    assert outs[1].count(b'"code":0,') == 12 + 1 + 6 and outs[1].count(b'"code":13,') >= 4


def _batch_producer(addr: str, topic: str, tag: str, acked: list[bytes], stop: threading.Event, errors: list):
    c = None
    i = 0
    while not stop.is_set():
        bodies = [f"{tag}-{i}-{k}".encode() for k in range(8)]
        ext = send_v2_ext("pg", topic, "TBW102", 4, i % 4, 0, int(time.time() * 1000), 0, "", True)
        try:
            if c is None:
                c = SyncRemotingClient(addr, timeout=5)
            r = c.invoke(request(RequestCode.SEND_BATCH_MESSAGE, ext, encode_batch([(b, "", 0) for b in bodies])))
            if r.code == 0:
                acked += bodies
            else:
                errors.append((r.code, r.remark))
            i += 1
        except RemotingError:
            if c is not None:  # the connection died with its worker: reconnect
                c.close()
            c = None
            time.sleep(0.01)
    if c is not None:
        c.close()


def test_kill_9_worker_while_batches_are_sent_loses_no_acknowledged_message(start_broker):
    br = start_broker(workers=2)
    with SyncRemotingClient(br.addr) as c:
        assert create_topic(c, "CrashB", queues=4).code == 0
    pids = br.worker_pids()
    stop = threading.Event()
    acked: list[list[bytes]] = [[] for _ in range(4)]
    errors: list = []
    threads = [threading.Thread(target=_batch_producer, args=(br.addr, "CrashB", f"p{n}", acked[n], stop, errors))
               for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 15
    while True:
        now = br.worker_pids()
        if len(now) == 2 and pids[0] not in now:
            break
        assert time.monotonic() < deadline, f"worker not restarted: {now}"
        time.sleep(0.05)
    before = sum(map(len, acked))
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(10)
    assert sum(map(len, acked)) > before, "batches go on after the restart"
    assert not errors, errors[:5]
    stored: list[bytes] = []
    with SyncRemotingClient(br.addr, timeout=10) as c:
        for q in range(4):
            off = 0
            while True:
                r = pull(c, "CrashB", q, off)
                if r.code != 0:
                    break
                stored += [bytes(m.body) for m in iter_records(r.body)]
                off = int(r.ext_fields["nextBeginOffset"])
    have = set(stored)
    missing = [b for a in acked for b in a if b not in have]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
    # a batch is stored whole or not at all, its entries in order, one after another
    for a in acked:
        for k in range(0, len(a), 8):
            at = stored.index(a[k])
            assert stored[at:at + 8] == a[k:k + 8]
    assert br.stop(timeout=20) == 0
    rep = verify_store(StoreConfig(root=br.store, mapped_file_size_commitlog=TEST_SETTINGS["mappedFileSizeCommitLog"]))
    assert rep.ok, rep.problems[:5]
