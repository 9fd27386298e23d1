"""The page-floor limit row (shmq/bench/peers/limits.py): records of the size the shmq row's
local send stores, written whole into fresh preallocated files of the CommitLog's size, in a
run of its own directory that is gone afterwards."""
from __future__ import annotations

import os

import pytest

pytest.importorskip("hdrh")

from shmq.bench import engine, services
from shmq.bench.peers import PEERS, resolve
from shmq.bench.peers.limits import _PageWriter, record_size
from shmq.bench.scenarios import make

from .bench_env import env  # noqa: F401  (a fixture, used by name)

pytestmark = pytest.mark.timeout(180)


def test_the_row_writes_records_the_size_the_local_send_stores(env):
    """Two sends' commit-log offsets, and a batch of 64's, against record_size for the topic."""
    from shmq import Message, Producer
    from shmq.bench.peers.shmq_client import create_topic
    ns, broker = env.namesrv(), env.broker("ASYNC_FLUSH")
    for topic in (f"Bench{os.getpid()}x0", "T"):
        create_topic(broker, ns, topic, 1)
        p = Producer(f"pf-{len(topic)}", namesrv=ns, local="always").start()
        try:
            body = b"x" * 100
            offs = [int(p.send(Message(topic, body)).offset_msg_id[16:], 16) for _ in range(2)]
            p.send_batch([Message(topic, body) for _ in range(64)])
            offs.append(int(p.send(Message(topic, body)).offset_msg_id[16:], 16))
        finally:
            p.shutdown()
        assert offs[1] - offs[0] == record_size(100, topic)
        assert offs[2] - offs[1] == 65 * record_size(100, topic)
    assert record_size(100, "Bench12345x0") == 267


def test_batches_go_whole_into_fresh_preallocated_files(tmp_path):
    size, rec = 64 << 10, 267
    w = _PageWriter({"dir": str(tmp_path), "file_size": size, "record": rec}, 3)
    for _ in range(7):          # 3 batches of 64 fit a 64 KiB file (51,264 B): the 4th rolls
        w.put(64)
    w.put(1)
    w.close()
    names = sorted(os.listdir(tmp_path))
    assert names == ["p3-000000", "p3-000001", "p3-000002"]
    for n, batches in zip(names, (3, 3, 1)):
        path = tmp_path / n
        st = os.stat(path)
        assert st.st_size == size and st.st_blocks * 512 >= size  # allocated whole, as a CommitLog file
        data = path.read_bytes()
        used = batches * 64 * rec + (rec if n == names[-1] else 0)
        assert data[:used] == b"x" * used and data[used:] == bytes(size - used)
    big = _PageWriter({"dir": str(tmp_path), "file_size": size, "record": rec}, 4)
    with pytest.raises(ValueError, match="does not fit"):   # a batch larger than a file: said, not looped on
        big.put(size // rec + 1)
    big.close()


def test_the_row_runs_in_a_produce_run_and_leaves_nothing(env, monkeypatch):
    # the file size reaches the producers through the channel the parent builds: 1 MiB files here
    monkeypatch.setitem(services.BROKER_SETTINGS, "mappedFileSizeCommitLog", 1 << 20)
    assert resolve(["page-floor"]) == [PEERS["page-floor"]]
    peer = PEERS["page-floor"]()
    seen, dirs = [], []
    real_teardown = peer.teardown

    def teardown():
        dirs.append(peer._dir)
        seen.extend(os.listdir(peer._dir))
        real_teardown()
    peer.teardown = teardown
    r = engine.run(peer, make("produce", batch=64, duration=0.3, warmup=0.1), env)
    assert r.status == "ok", r.note
    assert r.sent > 64 and r.messages == 0
    assert len(seen) >= 2 and all(n.startswith("p0-") for n in seen)   # more than one fresh file: it rolled
    assert not os.path.exists(dirs[0])
    assert engine.run(PEERS["page-floor"](), make("e2e", rate=1000, duration=0.1), env).status == "skipped"
