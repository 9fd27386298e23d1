"""Held pulls (broker/worker/pull_hold.py): each is called back once, on the loop, when its
queue grows, when its time is up or at shutdown; a closed connection's hold is dropped."""
from __future__ import annotations

import asyncio
import threading

from shmq.broker.worker.pull_hold import PullHolds


class FakeStore:
    """max offsets per queue and a commit position the pull-wake thread can wait on."""

    def __init__(self):
        self.max = {}
        self.commit_pos = 0
        self._cv = threading.Condition()

    def max_offset(self, topic, qid):
        return self.max.get((topic, qid), 0)

    def append(self, topic, qid):
        with self._cv:
            self.max[(topic, qid)] = self.max_offset(topic, qid) + 1
            self.commit_pos += 1
            self._cv.notify_all()

    def wait(self, seen, timeout, spin=0.0):
        with self._cv:
            self._cv.wait_for(lambda: self.commit_pos != seen, timeout)
            return self.commit_pos


class Conn:
    closed = False


def run(coro_fn):
    async def main():
        loop = asyncio.get_running_loop()
        store = FakeStore()
        holds = PullHolds(store, loop)
        try:
            return await coro_fn(loop, store, holds)
        finally:
            holds.close()
    return asyncio.run(main())


def test_a_hold_is_answered_once_when_its_queue_grows_from_another_process():
    async def body(loop, store, holds):
        calls = []
        holds.hold("T", 0, 0, 5.0, calls.append, Conn())
        holds.hold("T", 1, 0, 5.0, lambda grew: calls.append(("q1", grew)), Conn())
        assert calls == [] and len(holds) == 2
        # an append by someone else: seen by the pull-wake thread, answered on the loop
        await loop.run_in_executor(None, store.append, "T", 0)
        for _ in range(200):
            if calls:
                break
            await asyncio.sleep(0.01)
        holds.check()  # a second check calls nobody twice
        assert calls == [True] and len(holds) == 1
    run(body)


def test_a_send_of_this_worker_answers_in_the_next_callback():
    async def body(loop, store, holds):
        calls = []
        holds.hold("T", 0, 0, 5.0, calls.append, Conn())
        store.max[("T", 0)] = 1
        holds.appended()
        assert calls == []  # not inside the send: its own answer goes first
        await asyncio.sleep(0)
        assert calls == [True]
    run(body)


def test_a_hold_already_satisfied_is_answered_at_once():
    async def body(loop, store, holds):
        store.max[("T", 0)] = 3
        calls = []
        holds.hold("T", 0, 2, 5.0, calls.append, Conn())
        assert calls == [True] and len(holds) == 0
    run(body)


def test_timeout_and_shutdown_answer_false_and_a_closed_connection_is_dropped():
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
    run(body)


def test_a_failing_callback_does_not_stop_the_others():
    async def body(loop, store, holds):
        calls = []

        def boom(grew):
            raise RuntimeError("answer failed")
        holds.hold("T", 0, 0, 5.0, boom, Conn())
        holds.hold("T", 0, 0, 5.0, calls.append, Conn())
        store.max[("T", 0)] = 1
        holds.check()
        assert calls == [True] and len(holds) == 0
    run(body)
