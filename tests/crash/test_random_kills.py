"""100 writers killed at random moments while four append at once (half of them also kill
themselves at a random fault point inside the append), then a full verification: the log
verifies, queues are dense, every acknowledged message is stored exactly once."""
import collections
import os
import random
import signal
import time

import pytest

from shmq.message.record import decode_record
from shmq.native import lib
from shmq.store.verify import verify_store

pytestmark = pytest.mark.crash

FAULTS = [lib.SHMQ_FP_AFTER_LOCK, lib.SHMQ_FP_AFTER_INTENT, lib.SHMQ_FP_MID_RECORD,
          lib.SHMQ_FP_AFTER_RECORD, lib.SHMQ_FP_AFTER_CQ, lib.SHMQ_FP_MID_PUBLISH,
          lib.SHMQ_FP_AFTER_PUBLISH]
QUEUES = 4


def test_hundred_random_kills_under_load(open_store, children, tmp_path):
    seed = random.randrange(1 << 30)
    print(f"random seed {seed}")
    rng = random.Random(seed)
    s = open_store(mapped_file_size_commitlog=256 * 1024, cq_entries_per_file=500)
    acks = tmp_path / "acks"
    acks.mkdir()
    live: dict[int, tuple] = {}
    kills = next_id = 0
    deadline = time.monotonic() + 240
    while kills < 100 and time.monotonic() < deadline:
        while len(live) < 4:
            wid = f"w{next_id}"
            next_id += 1
            ack = acks / wid
            args = [s.cfg.root, "write", wid, 1_000_000, QUEUES, ack]
            if rng.random() < 0.5:
                args += [rng.randrange(20, 3000), rng.choice(FAULTS)]
            p = children.store_child(*args)
            live[p.pid] = (p, ack)
        time.sleep(rng.uniform(0.005, 0.05))
        for pid, (p, _) in list(live.items()):
            if p.poll() is not None:
                assert p.returncode == -signal.SIGKILL, f"writer exited {p.returncode}"
                kills += 1
                del live[pid]
        started = [pid for pid, (_, ack) in live.items() if ack.exists() and ack.stat().st_size]
        if started:
            pid = rng.choice(started)
            os.kill(pid, signal.SIGKILL)
            live[pid][0].wait()
            del live[pid]
            kills += 1
    for p, _ in live.values():
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
    assert kills >= 100

    # the next append repairs whatever the last victim left, then everything verifies
    s.put("T", 0, b"final")
    rep = verify_store(s.cfg, s.commit_pos)
    assert rep.ok, rep.problems[:5]
    stored = collections.Counter()
    for q in range(QUEUES):
        off = 0
        while True:
            g = s.get_messages("T", q, off, max_count=512, max_bytes=1 << 20)
            if not g.messages:
                break
            stored.update(bytes(decode_record(m).body) for m in g.messages)
            off = g.next_begin_offset
        assert off == s.max_offset("T", q), (q, off, s.get_messages("T", q, off, max_count=4), s.queues.get("T", q).entry(off), s.commit_pos)
    dup = [b for b, c in stored.items() if c > 1]
    assert not dup, dup[:5]
    lost = []
    for ack in acks.iterdir():
        for line in ack.read_text().split():
            if f"{ack.name}:{line}".encode() not in stored:
                lost.append(f"{ack.name}:{line}")
    assert not lost, f"{len(lost)} acknowledged messages missing: {lost[:5]}"
    print(f"{kills} kills, {sum(stored.values())} messages stored, steals {s.cb.ctl.lock.steals}, "
          f"repairs completed {s.cb.ctl.lock.repairs_completed}, rolled back {s.cb.ctl.lock.repairs_rolled_back}")
