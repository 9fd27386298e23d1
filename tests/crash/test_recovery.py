"""The owner (broker) killed with SIGKILL, then its files damaged the ways a crash or power
loss leaves them: the restart serves everything up to the last good record, and the
ConsumeQueues and the index agree with the log."""
import os
import signal
import struct

import pytest

from shmq.message.record import decode_record
from shmq.store import GetStatus, MessageStore
from shmq.store.verify import verify_store

from ..conftest import small_config

pytestmark = pytest.mark.crash

FSIZE, PER = 64 * 1024, 100


def crash_owner(children, root, n, queues=2):
    p = children.store_child(root, "own", FSIZE, PER, n, queues, stdout=-1, text=True)
    line = p.stdout.readline().split()
    assert line[0] == "ready", line
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    return int(line[1])


def last_record(cfg, end):
    """(phys, size) of the last record before ``end``."""
    rep = verify_store(cfg, end)
    assert rep.ok
    from shmq.store.commitlog import CommitLog
    cl = CommitLog(cfg)
    pos = (end // FSIZE) * FSIZE
    last = None
    while pos < end:
        rec = cl.record_at(pos)
        last = (pos, len(rec))
        pos += len(rec)
    cl.close()
    return last


def all_bodies(s, queues=2):
    out = []
    for q in range(queues):
        g = s.get_messages("T", q, 0, max_count=100000, max_bytes=1 << 30)
        out += [bytes(decode_record(m).body) for m in g.messages]
    return sorted(out)


def test_kill_owner_then_restart_loses_nothing(store_root, children):
    end = crash_owner(children, store_root, 700)
    assert (store_root / "abort").exists()
    s = MessageStore.open(small_config(store_root))
    try:
        assert s.commit_pos == end
        assert all_bodies(s) == sorted(b"own:%d" % i for i in range(700))
        assert verify_store(s.cfg, s.commit_pos).ok
    finally:
        s.close()


def test_garbage_past_the_commit_position_is_cut(store_root, children):
    end = crash_owner(children, store_root, 300)
    path = store_root / "commitlog" / f"{(end // FSIZE) * FSIZE:020d}"
    with open(path, "r+b") as f:  # a half-written record and junk after the end
        f.seek(end % FSIZE)
        f.write(struct.pack(">iI", 500, 0xDAA320A7) + os.urandom(300))
    s = MessageStore.open(small_config(store_root))
    try:
        assert s.commit_pos == end
        assert s.recovery.bytes_zeroed > 0
        r = s.put("T", 0, b"next")
        assert r.phys_offset == end
        assert len(all_bodies(s)) == 301
    finally:
        s.close()


def test_bad_crc_in_the_last_record_ends_the_log_there(store_root, children):
    end = crash_owner(children, store_root, 300)
    cfg = small_config(store_root)
    phys, size = last_record(cfg, end)
    path = store_root / "commitlog" / f"{(phys // FSIZE) * FSIZE:020d}"
    with open(path, "r+b") as f:  # flip a body byte: CRC no longer matches
        f.seek(phys % FSIZE + 88)
        b = f.read(1)
        f.seek(phys % FSIZE + 88)
        f.write(bytes([b[0] ^ 0xFF]))
    s = MessageStore.open(cfg)
    try:
        assert s.commit_pos == phys
        bodies = all_bodies(s)
        assert len(bodies) == 299 and b"own:299" not in bodies
        assert s.max_offset("T", 1) == 149  # message 299 was queue 1 offset 149: cut from its CQ
        assert s.recovery.cq_entries_cut == 1
        assert s.get_messages("T", 1, 149).status is GetStatus.OFFSET_OVERFLOW_ONE
        rep = verify_store(cfg, s.commit_pos)
        assert rep.ok, rep.problems
        s.dispatcher.wait_until(s.commit_pos)
        assert s.query_by_key("T", "k299") == []
        assert len(s.query_by_key("T", "k298")) == 1
        r = s.put("T", 1, b"replacement")
        assert (r.phys_offset, r.queue_offset) == (phys, 149)
    finally:
        s.close()


@pytest.mark.parametrize("checkpoint", ["gone", "at_the_lost_record"])
@pytest.mark.parametrize("old_bytes", [8, 7])
def test_an_entry_torn_by_a_power_cut_is_cut(store_root, children, old_bytes, checkpoint):
    """A power cut keeps or drops each 4 KiB page, and 4,096 is no multiple of 20: an entry
    across two pages can come back half new, half old. Here the last record (queue 1 offset
    149) is lost and its entry is torn inside its PHYS: its first 8 or 7 bytes old (zeros),
    the rest new. It then points at the first record or into the middle of it, with the lost
    record's SIZE, which fits before the end. (Torn the other way, its SIZE is old, zero: an
    empty entry.) Recovery must drop it
    whether its scan met the queue's records (no checkpoint) or none (a checkpoint at the lost
    record): a kept torn entry served another message, or a record cut short (a CI run)."""
    end = crash_owner(children, store_root, 300)
    cfg = small_config(store_root)
    phys, size = last_record(cfg, end)
    with open(store_root / "commitlog" / f"{(phys // FSIZE) * FSIZE:020d}", "r+b") as f:
        f.seek(phys % FSIZE)
        f.write(bytes(end - phys))  # the last record never reached the disk
    with open(store_root / "consumequeue" / "T" / "1" / f"{100 * 20:020d}", "r+b") as f:
        at = 49 * 20  # queue offset 149 in the file of offsets 100..199
        f.seek(at)
        e = f.read(20)
        assert struct.unpack(">qiq", e)[:2] == (phys, size)
        f.seek(at)
        f.write(bytes(old_bytes) + e[old_bytes:])
    if checkpoint == "gone":
        (store_root / "checkpoint").unlink()
    else:
        from shmq.store.checkpoint import Checkpoint, path_of
        Checkpoint(phys, phys, 0).store(path_of(str(store_root)))
    s = MessageStore.open(cfg)
    try:
        assert s.commit_pos == phys
        assert s.max_offset("T", 1) == 149
        assert s.get_messages("T", 1, 149).status is GetStatus.OFFSET_OVERFLOW_ONE
        assert all_bodies(s) == sorted(b"own:%d" % i for i in range(299))
        rep = verify_store(cfg, s.commit_pos)
        assert rep.ok, rep.problems
        r = s.put("T", 1, b"replacement")
        assert (r.phys_offset, r.queue_offset) == (phys, 149)
    finally:
        s.close()


def test_lost_consume_queue_is_rebuilt_from_the_log(store_root, children):
    """Power loss can leave the CQ behind the log: entries are re-dispatched from records."""
    end = crash_owner(children, store_root, 400)
    cfg = small_config(store_root)
    qdir = store_root / "consumequeue" / "T" / "1"
    files = sorted(qdir.iterdir())
    files[-1].write_bytes(bytes(files[-1].stat().st_size))  # the newest CQ file's entries lost
    (store_root / "checkpoint").unlink()  # and the checkpoint with it
    s = MessageStore.open(cfg)
    try:
        assert s.commit_pos == end
        assert s.recovery.cq_entries_written > 0
        assert s.max_offset("T", 1) == 200
        assert all_bodies(s) == sorted(b"own:%d" % i for i in range(400))
    finally:
        s.close()


def test_stale_segment_of_dead_owner_is_replaced(store_root, children):
    crash_owner(children, store_root, 10)
    from shmq.errors import StaleSegment
    with pytest.raises(StaleSegment):
        MessageStore.attach(str(store_root))  # owner dead: a local client stays off it
    s = MessageStore.open(small_config(store_root))
    try:
        a = MessageStore.attach(str(store_root))
        a.put("T", 0, b"via new segment")
        a.close()
        assert s.max_offset("T", 0) == 6
    finally:
        s.close()


def test_writer_of_the_old_owner_is_fenced(store_root, children):
    p = children.store_child(store_root, "own", FSIZE, PER, 5, 1, stdout=-1, text=True)
    assert p.stdout.readline().startswith("ready")
    from shmq.errors import StaleSegment
    old = MessageStore.attach(str(store_root))
    old.put("T", 0, b"while the first owner lived")
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    s = MessageStore.open(small_config(store_root))
    try:
        with pytest.raises(StaleSegment):
            old.put("T", 0, b"after the new owner started")
        old.close()
        assert all_bodies(s, 1) == sorted([b"own:%d" % i for i in range(5)] + [b"while the first owner lived"])
    finally:
        s.close()


def test_kill_owner_while_indexing_then_every_key_is_found(store_root, children):
    """The owner is killed while its dispatcher indexes (in C, several IndexFiles of 4,095
    keys): after the restart's replay from the checkpoint every key finds its one message."""
    n = 10_000
    end = crash_owner(children, store_root, n)
    s = MessageStore.open(small_config(store_root))
    try:
        assert s.commit_pos == end
        assert s.dispatcher.wait_until(s.commit_pos, timeout=30)
        assert len(list((store_root / "index").iterdir())) >= 3
        for i in list(range(0, n, 97)) + [n - 1]:
            hits = s.query_by_key("T", f"k{i}")
            assert len(hits) == 1, (i, hits)
            assert bytes(decode_record(hits[0]).body) == b"own:%d" % i
    finally:
        s.close()
