"""native/handoff.c and client/handoff.py: which consume threads a hand-over wakes. A thread a
post woke that has not come back from its futex wait yet takes the next turn's tasks too (no
second thread woken for them); the spare tasks' look wakes threads only for threads stuck in a
listener, not for a backlog the awake thread is working through; and the count of threads on
their way back (``woken``) returns to 0, so no hand-over is left to the look for good."""
from __future__ import annotations

import random
import select
import threading
import time
from types import SimpleNamespace
from collections import deque

from shmq.client.handoff import ClientLoop, ConsumePool, HandoffSelector
from shmq.native import ffi, lib


def _sleeper(h):
    """A thread asleep in shmq_handoff_wait on ``h``; returns it and the list its result goes to."""
    out = []
    seen = h.seq
    t = threading.Thread(target=lambda: out.append(lib.shmq_handoff_wait(h, seen, 5000)), daemon=True)
    t.start()
    while h.waiters < 1:
        time.sleep(0.001)
    time.sleep(0.01)  # (waiters is counted just before the futex wait)
    return t, out


def _pay(h, ep):
    """One C wait of the loop (timeout 0) over the one word ``h``: pays what its turn owes."""
    slots = ffi.new("shmq_handoff *[1]", [h])
    fds, evs, spread = ffi.new("int[4]"), ffi.new("uint32_t[4]"), ffi.new("int32_t[1]")
    assert lib.shmq_handoff_epoll(ep.fileno(), slots, 1, 0, fds, evs, 4, spread) == 0
    return spread[0]


def test_a_turns_task_wakes_no_thread_while_a_woken_one_has_not_looked_yet():
    h = ffi.new("shmq_handoff *")
    ep = select.epoll()
    try:
        t, out = _sleeper(h)
        h.woken = 1  # as if a post had woken a thread that has no CPU yet
        h.posts = 1
        assert _pay(h, ep) == 3  # spare, a look set
        assert h.spare == 1 and h.waiters == 1 and not out  # the sleeper was left asleep
        h.woken, h.posts, h.spare, h.due = 0, 1, 0, 0
        _pay(h, ep)  # nobody on the way: one thread woken for the task
        t.join(5)
        assert out == [0] and h.woken == 0 and h.spare == 0  # the woken thread took its count back
    finally:
        ep.close()


def test_the_look_wakes_threads_for_stuck_listeners_only():
    sel = HandoffSelector()
    try:
        h = ffi.new("shmq_handoff *")
        a, b, c = (print, ()), (print, ()), (print, ())
        pool = SimpleNamespace(_tasks=deque([a, b, c]), mark=None, marked=0.0)
        assert sel.attach(h, pool)
        h.spare = 2
        sel.marks()  # the look set: the head noted
        assert pool.mark is a
        h.due, pool.marked = 123, pool.marked - 1  # (as if set a while ago)
        sel.respread()  # the same head at the look: stuck, a thread for each spare task
        assert (h.force, h.spare) == (2, 0)
        h.force, h.spare, h.due = 0, 5, 123
        pool._tasks.popleft()  # a task taken meanwhile: no thread woken, the look set again (due 0)
        sel.respread()
        assert (h.force, h.spare, h.due) == (0, 2, 0) and pool.mark is b
        h.spare, h.due = 2, 123
        pool.marked = time.monotonic()  # a look right after its mark (a late mark): set again
        sel.respread()
        assert (h.force, h.spare, h.due) == (0, 2, 0)
        pool._tasks.clear()
        sel.respread()  # all taken: nothing spare any more
        assert (h.force, h.spare) == (0, 0)
    finally:
        sel.close()


def test_a_backlog_behind_a_busy_listener_is_worked_by_the_one_awake_thread():
    # forty tasks handed over in one turn, each using the CPU ~0.5 ms with the GIL held: the
    # woken thread takes them in turn, and the looks (every ms) see it taking them, so no other
    # thread is woken only to wait on the GIL (before: three more at the first look)
    loop = ClientLoop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    pool = ConsumePool(4, "t", loop.handoff, th)
    seen = []
    try:
        for _ in range(5):  # one clean try of five (a loaded machine may stall the one thread)
            while pool._h.waiters < 4:
                time.sleep(0.001)
            ran, done = set(), threading.Event()

            def task(last):
                ran.add(threading.current_thread().name)
                end = time.perf_counter() + 0.0005
                while time.perf_counter() < end:
                    pass
                if last:
                    done.set()

            def hand_over():
                for i in range(40):
                    pool.submit(task, i == 39)
            loop.call_soon_threadsafe(hand_over)
            assert done.wait(10)
            seen.append(len(ran))
            if len(ran) == 1:
                break
        else:
            raise AssertionError(seen)
    finally:
        pool.shutdown()
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)
        loop.close()


def test_the_count_of_threads_on_their_way_back_returns_to_zero():
    # bursts of 1-4 tasks from the loop at random gaps, tasks of random length on 20 threads:
    # every task runs, and once all sleep no woken thread is counted (else every later
    # hand-over would wait for the look)
    loop = ClientLoop()
    th = threading.Thread(target=loop.run_forever, daemon=True)
    th.start()
    pool = ConsumePool(20, "t", loop.handoff, th)
    n, done, total = [0], threading.Event(), 5000
    rnd = random.Random(7)
    try:
        def task():
            n[0] += 1
            sum(range(rnd.randint(0, 300)))
            if n[0] == total:
                done.set()

        def burst(k):
            for _ in range(k):
                pool.submit(task)
        sent = 0
        while sent < total:
            k = min(total - sent, rnd.choice((1, 1, 1, 2, 4)))
            loop.call_soon_threadsafe(burst, k)
            sent += k
            if rnd.random() < 0.5:
                time.sleep(rnd.random() * 0.0003)
        assert done.wait(30), n
        deadline = time.monotonic() + 5
        while pool._h.waiters < 20 and time.monotonic() < deadline:
            time.sleep(0.005)
        assert pool._h.woken == 0 and n[0] == total
    finally:
        pool.shutdown()
        loop.call_soon_threadsafe(loop.stop)
        th.join(5)
        loop.close()
