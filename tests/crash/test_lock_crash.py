"""A writer killed with SIGKILL inside the append, while it holds the lock: the next locker
proves it dead (pid gone, zombie, or start time changed), steals the lock, and completes or
erases the dead append from the intent record; nothing is duplicated, nothing leaves a hole.
A live but stopped holder is never robbed."""
import os
import signal
import subprocess
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


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rpartition(")")[2].split()[0]


def wait_stopped(pid: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _state(pid) == "T":
            return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} never stopped")


@pytest.mark.parametrize("point", [lib.SHMQ_FP_AFTER_INTENT, lib.SHMQ_FP_MID_RECORD, lib.SHMQ_FP_MID_PUBLISH])
def test_sigstopped_holder_then_sigcont_both_complete(open_store, children, point):
    """A writer stopped (SIGSTOP) inside the append lock is never robbed: a second writer times
    out with a retriable error and stores nothing; after SIGCONT the first one finishes its
    append and the second one's retry succeeds; nothing is lost, nothing is duplicated."""
    s = open_store()
    s.put("T", 0, b"before")
    p = children.store_child(s.cfg.root, "stop", point, "stalled", stdout=subprocess.PIPE)
    wait_for_holder(s, p.pid)
    wait_stopped(p.pid)
    waiter = MessageStore.attach(s.cfg.root, lock_timeout_ms=300)
    try:
        for _ in range(2):  # a waiter times out as often as it tries; the holder keeps its lock
            with pytest.raises(LockTimeout) as e:
                waiter.put("T", 0, b"waiter")
            assert e.value.retriable and e.value.code == 2
            assert s.cb.ctl.lock.word >> 32 == p.pid and _state(p.pid) == "T"
        assert s.cb.ctl.lock.steals == 0
        os.kill(p.pid, signal.SIGCONT)
        assert p.stdout.readline().strip() == b"done"
        assert p.wait(30) == 0
        r = waiter.put("T", 0, b"waiter")  # the retry
    finally:
        waiter.close()
    assert bodies(s) == [b"before", b"stalled:0", b"waiter"]
    assert r.queue_offset == 2 and s.cb.ctl.lock.steals == 0
    rep = verify_store(s.cfg, s.commit_pos)
    assert rep.ok, rep.problems


def test_reused_pid_in_the_lock_word_counts_as_dead(open_store):
    """The lock word names a live pid whose start time is not the one recorded: the pid was
    reused by another process, so the holder is dead and its lock is taken over."""
    s = open_store()
    s.put("T", 0, b"before")
    me = lib.shmq_self_token()
    assert lib.shmq_pid_alive(me) == 1
    reused = (me & ~0xFFFFFFFF) | ((me + 12345) & 0xFFFFFFFF)  # this pid, another start time
    assert lib.shmq_pid_alive(reused) == 0
    s.cb.ctl.lock.word = reused  # as if a dead holder's pid now belonged to this process
    other = MessageStore.attach(s.cfg.root, lock_timeout_ms=1000)
    try:
        other.put("T", 0, b"after")
    finally:
        other.close()
    assert bodies(s) == [b"before", b"after"]
    assert s.cb.ctl.lock.steals == 1
