"""The local consumer's wait (native shmq_wait_queues, used by client/local_pull.py): it answers
the queue that has something new, round robin, sleeps through appends to queues it does not
look at, holds a queue whose last read found nothing until the commit position moves, and
answers a timeout, a changed queue set and a fenced store."""
import threading
import time

from shmq.native import ffi, lib
from shmq.store import MessageStore

from ..conftest import small_config


def _arrays(store, queues, offsets):
    ptrs = ffi.new("int64_t *[]", len(queues))
    offs = ffi.new("int64_t[]", len(queues))
    for i, (q, off) in enumerate(zip(queues, offsets)):
        ptrs[i] = store.max_offset_watch("T", q) if q is not None else ffi.NULL
        offs[i] = off
    return ptrs, offs


def _wait(store, ptrs, offs, *, start=0, seen=None, hold=-1, poke=None, poked=0, timeout_s=2.0):
    s = ffi.new("int64_t[1]", [store.commit_pos if seen is None else seen])
    r = lib.shmq_wait_queues(store.cb.ctl, ptrs, offs, len(offs), start, s, hold,
                             poke if poke is not None else ffi.NULL, poked, 0, int(timeout_s * 1e9), 0)
    return r, s[0]


def test_answers_the_queue_with_news_round_robin(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        for q in (0, 1, 2):
            store.put("T", q, b"first")
        ptrs, offs = _arrays(store, [0, 1, 2], [1, 1, 1])
        assert _wait(store, ptrs, offs, timeout_s=0.05)[0] == -1  # nothing new anywhere
        store.put("T", 1, b"x")
        store.put("T", 2, b"y")
        assert _wait(store, ptrs, offs)[0] == 1
        assert _wait(store, ptrs, offs, start=2)[0] == 2  # from `start` on
        offs[1] = offs[2] = 2
        assert _wait(store, ptrs, offs, timeout_s=0.05)[0] == -1
    finally:
        store.close()


def test_sleeps_through_appends_to_other_queues_until_its_own(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        store.put("T", 0, b"first")
        store.put("T", 1, b"first")
        ptrs, offs = _arrays(store, [0], [1])

        def writer():
            for _ in range(20):
                store.put("T", 1, b"other queue")
                time.sleep(0.002)
            store.put("T", 0, b"mine")
        th = threading.Thread(target=writer)
        t0 = time.monotonic()  # queue 0's append comes >= 40 ms after this
        th.start()
        r, seen = _wait(store, ptrs, offs, timeout_s=5)
        th.join()
        assert r == 0 and time.monotonic() - t0 >= 0.03  # not answered for queue 1's appends
        assert seen <= store.commit_pos
    finally:
        store.close()


def test_a_held_queue_and_a_queue_without_a_slot_wait_for_the_commit_position(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        store.put("T", 0, b"first")
        ptrs, offs = _arrays(store, [0, None], [0, 0])
        seen = store.commit_pos
        # queue 0 has an entry past offs[0], but its last read found nothing: held until a commit
        assert _wait(store, ptrs, offs, seen=seen, hold=0, timeout_s=0.05)[0] == -1
        store.put("T", 5, b"elsewhere")
        assert _wait(store, ptrs, offs, seen=seen, hold=0)[0] == 0
        # no slot: any commit, but only when no queue has news (queue 0 is held, and the commit moved)
        assert _wait(store, ptrs, offs, start=1, seen=seen, hold=0)[0] == 0
        assert _wait(store, ptrs, offs, start=1, seen=seen, hold=-1)[0] == 0  # news in queue 0 first
        offs[0] = 1
        assert _wait(store, ptrs, offs, start=1, seen=seen, hold=-1)[0] == 1
        assert _wait(store, ptrs, offs, start=1, hold=-1, timeout_s=0.05)[0] == -1  # no commit since
    finally:
        store.close()


def test_a_changed_queue_set_and_a_fenced_store_end_the_wait(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        store.put("T", 0, b"first")
        ptrs, offs = _arrays(store, [0], [1])
        poke = ffi.new("int32_t[1]", [7])
        assert _wait(store, ptrs, offs, poke=poke, poked=6)[0] == -3
        threading.Timer(0.05, lambda: lib.shmq_fence(store.cb.ctl)).start()
        assert _wait(store, ptrs, offs, poke=poke, poked=7, timeout_s=5)[0] == -2
    finally:
        store.close()


def test_the_timeout_runs_from_the_callers_clock_reading(store_root):
    # `now`: the caller's CLOCK_MONOTONIC reading at the wait's start (hot_wait.c passes the one
    # it read), so a deadline already behind it answers -1 at once; 0 reads the clock here
    store = MessageStore.open(small_config(store_root))
    try:
        store.put("T", 0, b"first")
        ptrs, offs = _arrays(store, [0], [1])
        for now, timeout_s, least, most in ((time.monotonic_ns() - int(10e9), 2.0, 0.0, 1.0), (0, 0.2, 0.18, 5.0)):
            s = ffi.new("int64_t[1]", [store.commit_pos])
            t = time.monotonic()
            r = lib.shmq_wait_queues(store.cb.ctl, ptrs, offs, 1, 0, s, -1, ffi.NULL, 0, 0, int(timeout_s * 1e9), now)
            assert r == -1 and least <= time.monotonic() - t < most
    finally:
        store.close()
