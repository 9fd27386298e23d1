"""A writer killed with SIGKILL inside the append, while it holds the lock: the next locker
proves it dead (pid gone, zombie, or start time changed), steals the lock, and completes or
erases the dead append from the intent record; nothing is duplicated, nothing leaves a hole.
A live but stopped holder is never robbed."""
import os
import signal
import time

import pytest

from shmq.errors import LockTimeout
from shmq.message.record import decode_record
from shmq.native import lib
from shmq.store import MessageStore
from shmq.store.verify import verify_store

pytestmark = pytest.mark.crash

# (fault point, whether the dead writer's message must survive the repair)
POINTS = [
    (lib.SHMQ_FP_AFTER_LOCK, False),
    (lib.SHMQ_FP_AFTER_INTENT, False),
    (lib.SHMQ_FP_MID_RECORD, False),
    (lib.SHMQ_FP_AFTER_RECORD, True),   # record complete, CQ entry missing: repair writes it
    (lib.SHMQ_FP_AFTER_CQ, True),
    (lib.SHMQ_FP_MID_PUBLISH, True),    # queue offset published, commit position not
    (lib.SHMQ_FP_AFTER_PUBLISH, True),
]


def wait_for_holder(store, pid, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if store.cb.ctl.lock.word >> 32 == pid:
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} never took the lock")


def bodies(store, q=0):
    g = store.get_messages("T", q, 0, max_count=1000)
    return [bytes(decode_record(m).body) for m in g.messages]


@pytest.mark.parametrize("point,survives", POINTS)
def test_kill_inside_the_append(open_store, children, point, survives):
    s = open_store()
    s.put("T", 0, b"before")
    p = children.store_child(s.cfg.root, "hold", point, "dead")
    wait_for_holder(s, p.pid)
    time.sleep(0.05)  # let it reach the fault point inside the lock
    os.kill(p.pid, signal.SIGKILL)
    # The survivor must get the lock well within 1 s or LockTimeout fails the test.
    survivor = MessageStore.attach(s.cfg.root, lock_timeout_ms=1000)
    try:
        r = survivor.put("T", 0, b"after")
    finally:
        survivor.close()
    p.wait()
    expected = [b"before", b"dead:0", b"after"] if survives else [b"before", b"after"]
    assert bodies(s) == expected
    assert r.queue_offset == len(expected) - 1
    assert s.cb.ctl.lock.steals == 1
    assert not s.cb.ctl.intent.active
    rep = verify_store(s.cfg, s.commit_pos)
    assert rep.ok, rep.problems


def test_zombie_holder_counts_as_dead(open_store, children):
    """A killed child not yet reaped is a zombie: kill(pid, 0) still succeeds, /proc says Z."""
    s = open_store()
    p = children.store_child(s.cfg.root, "hold", lib.SHMQ_FP_MID_RECORD, "z")
    wait_for_holder(s, p.pid)
    time.sleep(0.05)
    os.kill(p.pid, signal.SIGKILL)
    time.sleep(0.1)  # not reaped: p.wait() comes after
    survivor = MessageStore.attach(s.cfg.root, lock_timeout_ms=1000)
    try:
        survivor.put("T", 0, b"after")
    finally:
        survivor.close()
    p.wait()
    assert bodies(s) == [b"after"]


def test_live_stalled_holder_is_never_robbed(open_store, children):
    s = open_store()
    p = children.store_child(s.cfg.root, "hold", lib.SHMQ_FP_MID_RECORD, "slow")
    wait_for_holder(s, p.pid)
    os.kill(p.pid, signal.SIGSTOP)
    waiter = MessageStore.attach(s.cfg.root, lock_timeout_ms=300)
    try:
        with pytest.raises(LockTimeout):
            waiter.put("T", 0, b"not stored")
        assert s.cb.ctl.lock.word >> 32 == p.pid  # still its lock
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        waiter.put("T", 0, b"stored")
    finally:
        waiter.close()
    assert bodies(s) == [b"stored"]
