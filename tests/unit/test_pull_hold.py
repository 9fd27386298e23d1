"""Held pulls (broker/worker/pull_hold.py): each is called back once, on the loop, when its
queue grows, when its time is up or at shutdown; a closed connection's hold is dropped. An
append by another process wakes the loop through the C pull-wake thread; with a wake bit of its
own, the worker's own appends do not (its loop checks after them itself)."""
from __future__ import annotations

import asyncio
import os
import time

from shmq.broker.worker.pull_hold import PullHolds
from shmq.native import lib
from shmq.store import MessageStore

from ..conftest import small_config


class Conn:
    """A hold's owner as check() uses it: a connection's ``closed`` and ``defer_flush``."""
    closed = False

    def defer_flush(self) -> bool:
        return False


def run(store_root, coro_fn, own_bit=None):
    async def main():
        loop = asyncio.get_running_loop()
        store = MessageStore.open(small_config(store_root))
        holds = PullHolds(store, loop, own_bit=own_bit)
        try:
            return await coro_fn(loop, store, holds)
        finally:
            holds.close()
            store.close()
    return asyncio.run(main())


def _append_from_a_child(store, qid=0) -> None:
    pid = os.fork()
    if pid == 0:
        try:
            store.put("T", qid, b"x")
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0


async def _until(pred, s=5.0):
    for _ in range(int(s / 0.01)):
        if pred():
            return True
        await asyncio.sleep(0.01)
    return False


def test_a_hold_is_answered_once_when_its_queue_grows_from_another_process(store_root):
    async def body(loop, store, holds):
        calls = []
        holds.hold("T", 0, 0, 5.0, calls.append, Conn())
        holds.hold("T", 1, 0, 5.0, lambda grew: calls.append(("q1", grew)), Conn())
        assert calls == [] and len(holds) == 2
        _append_from_a_child(store)  # seen by the pull-wake thread, answered on the loop
        assert await _until(lambda: calls)
        holds.check()  # a second check calls nobody twice
        assert calls == [True] and len(holds) == 1
    run(store_root, body)


def test_the_workers_own_append_is_checked_by_its_loop_and_anothers_still_wakes_it(store_root):
    async def body(loop, store, holds):
        calls = []
        holds.hold("T", 0, 0, 5.0, lambda grew: calls.append(("q0", grew)), Conn())
        holds.hold("T", 1, 0, 5.0, lambda grew: calls.append(("q1", grew)), Conn())
        await asyncio.sleep(0.2)    # the armed thread is asleep on the store's futex by now
        store.put("T", 0, b"own")   # this worker's append: no wake-up of the loop...
        await asyncio.sleep(0.02)
        assert calls == []
        holds.appended()            # ...its loop looks itself, in the next callback
        assert calls == []          # not inside the send: its own answer goes first
        await asyncio.sleep(0)
        assert calls == [("q0", True)]
        _append_from_a_child(store, qid=1)  # another appender still wakes it
        assert await _until(lambda: len(calls) == 2)
        assert calls == [("q0", True), ("q1", True)]
    run(store_root, body, own_bit=3)


def test_the_sleeping_pull_wake_thread_is_counted_apart_and_another_workers_append_wakes_it(store_root):
    """The armed thread of the worker with bit 3 sleeps counted in bit 3's count of
    data_skip_waiters, not in data_waiters (which counts the sleepers every append wakes, such
    as the store's idle index dispatcher): so that worker's own appends need no FUTEX_WAKE for
    it (one that woke nobody, per append), while another worker's (bit 5) still wake it."""
    async def body(loop, store, holds):
        calls = []
        holds.hold("T", 0, 0, 5.0, calls.append, Conn())
        await asyncio.sleep(0.2)  # asleep on the store's futex by now
        pos = store.cb.ctl.pos
        assert (pos.data_skip_waiters[0], pos.data_skip_waiters[1]) == (1 << 12, 0)
        pid = os.fork()
        if pid == 0:
            try:
                lib.shmq_set_data_wake_bit(5)  # another worker's append
                store.put("T", 0, b"x")
            finally:
                os._exit(0)
        assert os.waitpid(pid, 0)[1] == 0
        assert await _until(lambda: calls)
        assert calls == [True]
    run(store_root, body, own_bit=3)


def test_a_hold_already_satisfied_is_answered_at_once(store_root):
    async def body(loop, store, holds):
        for _ in range(3):
            store.put("T", 0, b"x")
        calls = []
        holds.hold("T", 0, 2, 5.0, calls.append, Conn())
        assert calls == [True] and len(holds) == 0
    run(store_root, body)


def test_timeout_and_shutdown_answer_false_and_a_closed_connection_is_dropped(store_root):
    async def body(loop, store, holds):
        calls = []
        holds.hold("T", 0, 0, 0.05, lambda grew: calls.append(("timeout", grew)), Conn())
        await asyncio.sleep(0.2)
        assert calls == [("timeout", False)] and len(holds) == 0
        gone = Conn()
        holds.hold("T", 0, 0, 5.0, lambda grew: calls.append(("gone", grew)), gone)
        holds.hold("T", 1, 0, 5.0, lambda grew: calls.append(("stop", grew)), Conn())
        gone.closed = True
        holds.check()
        assert len(holds) == 1
        holds.release_all()
        assert calls == [("timeout", False), ("stop", False)] and len(holds) == 0
    run(store_root, body)


def test_a_failing_callback_does_not_stop_the_others(store_root):
    async def body(loop, store, holds):
        calls = []

        def boom(grew):
            raise RuntimeError("answer failed")
        holds.hold("T", 0, 0, 5.0, boom, Conn())
        holds.hold("T", 0, 0, 5.0, calls.append, Conn())
        store.put("T", 0, b"x")
        holds.check()
        assert calls == [True] and len(holds) == 0
    run(store_root, body)


def test_holds_time_out_each_at_its_own_deadline(store_root):
    async def body(loop, store, holds):
        calls = []
        holds.hold("T", 0, 0, 0.30, lambda grew: calls.append(("late", grew)), Conn())
        holds.hold("T", 1, 0, 0.05, lambda grew: calls.append(("early", grew)), Conn())  # moves the sweep
        holds.hold("T", 2, 0, 5.0, lambda grew: calls.append(("answered", grew)), Conn())
        await asyncio.sleep(0.15)
        assert calls == [("early", False)]
        store.put("T", 2, b"x")
        holds.check()
        assert await _until(lambda: len(calls) == 3)
        assert calls == [("early", False), ("answered", True), ("late", False)] and len(holds) == 0
    run(store_root, body)


def test_closing_the_store_ends_the_c_helper_threads_before_the_unmap(store_root):
    """A worker's shutdown closes its holds, then its store: the pull-wake thread was still
    asleep inside the control block (a 1 s slice) and the confirm bridge inside its flush wait
    (50 ms), and woke to write to the unmapped page (SIGSEGV in wait_data after a broker's
    stop). The store's close now ends and waits for them first (this test arms the pull-wake
    thread): the child lives on."""
    owner = MessageStore.open(small_config(store_root))  # the supervisor's part; the child attaches as a worker
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            async def main():
                loop = asyncio.get_running_loop()
                store = MessageStore.attach(store_root)
                holds = PullHolds(store, loop, own_bit=1)
                holds.hold("T", 0, 0, 30.0, lambda grew: None, Conn())  # arms the pull-wake thread
                await asyncio.sleep(0.2)  # asleep in the block now
                holds.close()
                store.close()
                time.sleep(1.5)  # past its slice: a thread still waiting would wake and fault
            asyncio.run(main())
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    owner.close()
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child ended with status {status:#x}"


def test_a_hold_of_a_queue_made_after_it_is_answered_when_the_queue_grows(store_root):
    """A consumer holds a pull of its %RETRY% queue before the queue exists: each check looks
    the queue up (no watch yet) until it is made, then follows it like any other."""
    async def body(loop, store, holds):
        calls = []
        holds.hold("%RETRY%G", 0, 0, 5.0, lambda grew: calls.append(("retry", grew)), Conn())
        holds.hold("%RETRY%G", 1, 1, 5.0, lambda grew: calls.append(("later", grew)), Conn())
        holds.check()
        assert calls == [] and len(holds) == 2
        store.put("%RETRY%G", 0, b"x")
        store.put("%RETRY%G", 1, b"x")  # made, but its hold waits for offset 1
        holds.check()
        assert calls == [("retry", True)] and len(holds) == 1
        store.put("%RETRY%G", 1, b"y")
        holds.check()
        assert calls == [("retry", True), ("later", True)] and len(holds) == 0
    run(store_root, body)


def test_the_c_scan_says_which_holds_are_due_and_refuses_what_is_not_a_hold(store_root):
    """PullHolds.check's scan (``RemotingSends.due``, remoting_pull.c): a hold is due when its
    queue's max offset passed its offset, its owner closed, or its queue was unknown and is
    there now; anything else raises."""
    import pytest
    from shmq.broker.worker.pull_hold import _FIND, _due as scan

    async def body(loop, store, holds):
        def _due(hs):
            return scan(hs, _FIND, holds._ctl)
        store.put("T", 0, b"x")
        quiet, closed = Conn(), Conn()
        closed.closed = True
        holds.hold("T", 0, 1, 5.0, lambda grew: None, quiet)      # waits for offset 1
        holds.hold("T", 1, 0, 5.0, lambda grew: None, closed)     # not grown, owner closed
        holds.hold("NOPE", 0, 0, 5.0, lambda grew: None, quiet)   # unknown queue: due once it is made
        assert {(h.topic, h.qid) for h in _due(holds._holds)} == {("T", 1)}
        store.put("T", 0, b"y")
        store.put("NOPE", 0, b"z")
        assert {(h.topic, h.qid) for h in _due(holds._holds)} == {("T", 0), ("T", 1), ("NOPE", 0)}
        assert _due(set()) is None
        with pytest.raises(AttributeError):
            _due([object()])
        with pytest.raises(TypeError):
            _due(5)
        with pytest.raises(ValueError):
            scan(set(), 0, 0)
    run(store_root, body)
