"""The PushConsumer's consume threads (client/handoff.py ConsumePool): tasks run on n
threads at once; a task that raises does not stop its thread; shutdown waits for the running
tasks, drops the ones not started, and refuses new ones."""
from __future__ import annotations

import threading

import pytest

from shmq.client.handoff import ConsumePool


def test_tasks_run_side_by_side_and_a_failing_one_stops_nothing():
    pool = ConsumePool(3, "t")
    barrier = threading.Barrier(3, timeout=5)
    names, done = set(), threading.Event()

    def boom():
        raise RuntimeError("listener bug")

    def meet():
        names.add(threading.current_thread().name)
        barrier.wait()  # only passes if three tasks run at the same time

    for _ in range(3):
        pool.submit(boom)
    for _ in range(3):
        pool.submit(meet)
    pool.submit(done.set)
    assert done.wait(5)
    assert len(names) == 3
    pool.shutdown()


def test_shutdown_waits_for_the_running_and_drops_the_rest():
    pool = ConsumePool(1, "t")
    started, release, ran = threading.Event(), threading.Event(), []

    def slow():
        started.set()
        release.wait(5)
        ran.append("slow")
    pool.submit(slow)
    pool.submit(ran.append, "queued")
    assert started.wait(5)
    stopper = threading.Thread(target=pool.shutdown)
    stopper.start()
    stopper.join(0.2)
    assert stopper.is_alive()  # waiting for the running task
    release.set()
    stopper.join(5)
    assert ran == ["slow"]
    with pytest.raises(RuntimeError):
        pool.submit(ran.append, "late")
