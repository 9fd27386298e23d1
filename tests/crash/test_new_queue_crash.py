"""kill -9 during the first sends to new queues (whose sparse ConsumeQueue files the append
allocates page by page): writers killed at random moments and at every fault point of the
append, then the owner itself killed and the store recovered. Afterwards the log verifies,
every acknowledged message is stored once, and no ConsumeQueue entry points past the end of
the recovered CommitLog."""
import os
import random
import signal
import subprocess
import time

import pytest

from shmq.message.record import decode_record
from shmq.native import lib
from shmq.store import MessageStore
from shmq.store.verify import verify_store
from tests.conftest import small_config

pytestmark = pytest.mark.crash

FAULTS = [lib.SHMQ_FP_AFTER_LOCK, lib.SHMQ_FP_AFTER_INTENT, lib.SHMQ_FP_MID_RECORD,
          lib.SHMQ_FP_AFTER_RECORD, lib.SHMQ_FP_AFTER_CQ, lib.SHMQ_FP_MID_PUBLISH]


def _wait_acks(p, ack, n: int) -> None:
    deadline = time.monotonic() + 30
    while not ack.exists() or len(ack.read_bytes().split()) < n:
        assert p.poll() is None and time.monotonic() < deadline, p.returncode
        time.sleep(0.005)


def _acked(acks) -> dict[str, int]:
    """writer id -> messages it saw acknowledged."""
    return {f.name: len(f.read_text().split()) for f in acks.iterdir()}


def _check(store, acked: dict[str, int]) -> None:
    end = store.commit_pos
    rep = verify_store(store.cfg, end)
    assert rep.ok, rep.problems[:5]
    bodies = set()
    for topic, qid in store.queues.on_disk():
        cq = store.queues.get(topic, qid)
        n = cq.last_offset()
        for off in range(cq.first_file_offset(), n):
            e = cq.entry(off)
            assert e is not None and e[0] + e[1] <= end, (topic, qid, off, e, end)
        got = store.get_messages(topic, qid, 0, max_count=16, max_bytes=1 << 20)
        bodies.update(bytes(decode_record(m).body) for m in got.messages)
    for wid, n in acked.items():
        missing = [i for i in range(n) if f"{wid}:{i}".encode() not in bodies]
        assert not missing, (wid, missing[:5])


def _start(open_store, tmp_path):
    """A seeded random source (its seed printed, to replay a failure), the store, the acks' directory."""
    seed = random.randrange(1 << 30)
    print(f"random seed {seed}")
    s = open_store()
    acks = tmp_path / "acks"
    acks.mkdir()
    return random.Random(seed), s, acks


def test_writers_killed_in_first_sends_to_new_queues(open_store, children, tmp_path):
    rng, s, acks = _start(open_store, tmp_path)
    for k in range(12):
        wid = f"w{k}"
        ack = acks / wid
        if k < len(FAULTS):  # each fault point once, at a queue's first entry
            p = children.store_child(s.cfg.root, "spread", wid, 400, ack, rng.randrange(1, 60), FAULTS[k])
        else:  # killed from outside at a random moment
            p = children.store_child(s.cfg.root, "spread", wid, 2000, ack)
            _wait_acks(p, ack, 1)
            time.sleep(rng.uniform(0, 0.05))
            os.kill(p.pid, signal.SIGKILL)
        p.wait(60)
        assert p.returncode in (-signal.SIGKILL, 0), (wid, p.returncode)
    s.put("T", 0, b"final")  # repairs what the last victim left
    _check(s, _acked(acks))


def test_preparers_killed_while_writers_fill_the_queues_they_prepare(open_store, children, tmp_path):
    """A local producer prepares a topic's queues (shmq_cq_prepare: map, pwrite of the next
    entry's page under the lock) while other processes append to them: preparers are killed at
    random moments (in the lock or out), writers too, and no acknowledged entry is lost."""
    rng, s, acks = _start(open_store, tmp_path)
    for k in range(4):
        wid = f"v{k}"
        p = children.store_child(s.cfg.root, "prepare", wid, 150, stdout=subprocess.PIPE, text=True)
        assert p.stdout.readline().strip() == "ready"  # every queue prepared once; it goes on
        w = children.store_child(s.cfg.root, "spread", wid, 1200, acks / wid)
        _wait_acks(w, acks / wid, 1)
        time.sleep(rng.uniform(0, 0.1))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        if k % 2:
            time.sleep(rng.uniform(0, 0.05))
            os.kill(w.pid, signal.SIGKILL)
        w.wait(60)
        assert w.returncode in (-signal.SIGKILL, 0), (wid, w.returncode)
    s.put("T", 0, b"final")  # repairs what the last victim left
    _check(s, _acked(acks))


def test_owner_killed_in_first_sends_then_recovered(children, tmp_path, store_root):
    acks = tmp_path / "acks"
    acks.mkdir()
    for k in range(3):
        p = children.store_child(store_root, "own-spread", f"o{k}", 4000, acks / f"o{k}")
        _wait_acks(p, acks / f"o{k}", 100)
        time.sleep(random.uniform(0, 0.05))
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    s = MessageStore.open(small_config(store_root))
    try:
        _check(s, _acked(acks))
        # the queues are empty but for one message: their files allocate a page or less each
        blocks = sum(os.stat(os.path.join(d, f)).st_blocks for d, _, fs in os.walk(s.cfg.consumequeue_dir)
                     for f in fs)
        queues = len(s.queues.on_disk())
        assert queues > 100 and blocks * 512 <= queues * 4096
    finally:
        s.close()
