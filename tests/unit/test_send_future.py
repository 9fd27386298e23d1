"""The Future an async send returns (client/send_future.py) behaves as a user of
concurrent.futures.Future expects: the result or the error once, a waiting thread woken, a timeout
raised, the send's callback and every done-callback called exactly once, in whichever order the
completion and the registration come, across threads."""
from __future__ import annotations

import threading
import time
from concurrent.futures import InvalidStateError

import pytest

from shmq.client.send_future import SendFuture


def test_result_and_exception_once():
    got = []
    f = SendFuture(got.append)
    assert not f.done() and f.running() and not f.cancel() and not f.cancelled()
    f.set_result("r")
    assert f.done() and f.result(0) == "r" and f.exception(0) is None and got == ["r"]
    with pytest.raises(InvalidStateError):
        f.set_result("again")
    with pytest.raises(InvalidStateError):
        f.set_exception(ValueError())
    assert got == ["r"] and f.result() == "r"
    e = ValueError("no")
    g = SendFuture(got.append)
    g.set_exception(e)
    assert g.exception() is e and got == ["r", e]
    with pytest.raises(ValueError):
        g.result()


def test_a_waiting_thread_is_woken_and_a_timeout_raises():
    f = SendFuture()
    with pytest.raises(TimeoutError):
        f.result(0.05)
    with pytest.raises(TimeoutError):
        f.exception(0.01)
    out = []
    waiters = [threading.Thread(target=lambda: out.append(f.result(10))) for _ in range(4)]
    for t in waiters:
        t.start()
    time.sleep(0.05)
    f.set_result(7)
    for t in waiters:
        t.join(5)
    assert out == [7] * 4


def test_callbacks_run_once_whatever_the_order_across_threads():
    for _ in range(300):
        f = SendFuture()
        calls = []
        start = threading.Barrier(3)

        def add():
            start.wait()
            for _ in range(5):
                f.add_done_callback(calls.append)

        adders = [threading.Thread(target=add) for _ in range(2)]
        for t in adders:
            t.start()
        start.wait()
        f.set_result(1)
        for t in adders:
            t.join(5)
        assert len(calls) == 10 and all(c is f for c in calls)
    late = []
    f.add_done_callback(late.append)  # added after the completion: called at once
    assert late == [f]


def test_a_raising_callback_is_logged_and_the_result_stands(caplog):
    f = SendFuture(lambda r: 1 / 0)
    f.set_result("ok")
    assert f.result() == "ok" and "raised" in caplog.text
