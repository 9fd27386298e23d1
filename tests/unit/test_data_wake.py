"""The appends' wake of the sleepers on the store's data futex (native/core_private.h wake_data,
core_wait.c wait_data): data_waiters counts the sleepers with every wake bit and carries a
"woken" bit (bit 31), set by the append that woke them all and cleared by every sleeper that
counts itself in. While it is set, further appends make no FUTEX_WAKE (their sleepers were
woken and have yet to run), and no sleeper that counted itself in later is ever missed."""
import random
import threading
import time

from shmq.native import lib
from shmq.store import MessageStore

from ..conftest import small_config

WOKEN = 0x80000000


def _open(root):
    # no services: no index dispatcher sleeping on the same futex beside the test's sleepers
    return MessageStore.open(small_config(root), start_services=False)


def _until(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def test_an_append_marks_its_sleepers_woken_and_a_sleeper_counting_itself_in_clears_the_mark(store_root):
    store = _open(store_root)
    pos = store.cb.ctl.pos
    try:
        store.put("T", 0, b"first")
        # a sleeper that was woken but has not run yet (on a busy core): counted, not marked
        pos.data_waiters = 1
        store.put("T", 0, b"x")
        assert pos.data_waiters == WOKEN | 1   # this append woke it
        store.put("T", 0, b"y")
        assert pos.data_waiters == WOKEN | 1   # the next ones leave it (and make no FUTEX_WAKE)

        # a real sleeper now: it counts itself in and clears the mark, so the next append wakes it
        seen = store.commit_pos
        out = []
        th = threading.Thread(target=lambda: out.append(lib.shmq_wait_data(store.cb.ctl, seen, 0, int(10e9))))
        th.start()
        assert _until(lambda: pos.data_waiters == 2)
        t0 = time.monotonic()
        store.put("T", 0, b"z")
        th.join(5)
        assert out and out[0] > seen and time.monotonic() - t0 < 2   # woken, not timed out
        assert pos.data_waiters == WOKEN | 1   # it left; the stale one is still counted, marked
    finally:
        pos.data_waiters = 0
        store.close()


def test_no_sleeper_is_missed_among_many_appends_and_sleeps(store_root):
    """Three sleepers in a loop (each waits for the position it saw to move) against an appender
    that appends at least every 2 ms for 1.5 s: every wait ends by a wake-up within
    milliseconds, none by its 1 s timeout; the last append wakes all that still sleep."""
    store = _open(store_root)
    try:
        store.put("T", 0, b"first")
        done = threading.Event()
        slow = []
        timeout_s = 1.0

        def sleeper():
            while not done.is_set():
                seen = store.commit_pos
                t0 = time.monotonic()
                lib.shmq_wait_data(store.cb.ctl, seen, 0, int(timeout_s * 1e9))
                if time.monotonic() - t0 >= timeout_s * 0.5:
                    slow.append(seen)

        ths = [threading.Thread(target=sleeper) for _ in range(3)]
        for th in ths:
            th.start()
        rnd = random.Random(7)
        end = time.monotonic() + 1.5
        i = 0
        while time.monotonic() < end:
            store.put("T", i % 3, b"m")
            i += 1
            if rnd.random() < 0.5:
                time.sleep(rnd.random() * 0.002)
        done.set()
        store.put("T", 0, b"last")   # ends the waits still asleep
        for th in ths:
            th.join(timeout_s + 2)
        assert not slow
        assert store.cb.ctl.pos.data_waiters & ~WOKEN == 0
    finally:
        store.close()
