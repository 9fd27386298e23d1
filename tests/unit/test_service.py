"""shmq.service: the one background-service pattern (thread and asyncio flavours).

What a user of a service relies on: start and stop may be called twice; a failing round is
logged and counted and the next round still runs; stop ends a service that sleeps a long
interval at once; wake runs a round now; a round may choose its next wait."""
from __future__ import annotations

import asyncio
import logging
import threading
import time

import pytest

from shmq.service import AsyncService, ThreadService

LONG = 3600.0  # an interval no test may wait for


def wait_for(cond, timeout=5.0):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.002)
    return True


async def until(cond, timeout=5.0):
    """Await ``cond()`` (a loaded machine may run a 1 ms service far less often)."""
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.002)


class TestThreadService:
    def test_start_and_stop_are_idempotent(self):
        calls = []
        svc = ThreadService("t-idem", 0.001, lambda: calls.append(1))
        assert svc.stop() is True  # never started: nothing to do
        svc.start()
        first = svc._thread
        svc.start()
        assert svc._thread is first
        assert wait_for(lambda: len(calls) >= 3)
        assert svc.stop() is True and svc.stop() is True
        assert not svc.running and not first.is_alive()
        n = len(calls)
        time.sleep(0.02)
        assert len(calls) == n  # no round after stop returned
        svc.start()  # a stopped service starts again
        assert wait_for(lambda: len(calls) > n)
        assert svc.stop()

    def test_a_failing_round_is_logged_counted_and_the_service_goes_on(self, caplog):
        n = [0]

        def job():
            n[0] += 1
            if n[0] % 2:
                raise RuntimeError(f"boom {n[0]}")

        svc = ThreadService("t-fail", 0.001, job, log=logging.getLogger("test.svc"))
        with caplog.at_level(logging.ERROR, logger="test.svc"):
            svc.start()
            assert wait_for(lambda: svc.errors >= 3 and svc.rounds >= 3)
            svc.stop()
        assert isinstance(svc.last_error, RuntimeError) and "boom" in str(svc.last_error)
        failed = [r for r in caplog.records if r.name == "test.svc"]
        assert failed and "t-fail: round failed" in failed[0].getMessage()
        assert failed[0].exc_info is not None  # the traceback is in the log

    def test_quiet_errors_are_one_line(self, caplog):
        def job():
            raise OSError("peer down")

        svc = ThreadService("t-quiet", 0.001, job, log=logging.getLogger("test.quiet"),
                            error_level=logging.DEBUG)
        with caplog.at_level(logging.DEBUG, logger="test.quiet"):
            svc.start()
            assert wait_for(lambda: svc.errors >= 1)
            svc.stop()
        rec = [r for r in caplog.records if r.name == "test.quiet"][0]
        assert rec.levelno == logging.DEBUG and "peer down" in rec.getMessage() and rec.exc_info is None

    def test_stop_wakes_a_sleeping_service_promptly(self):
        svc = ThreadService("t-sleep", LONG, lambda: None, first_delay_s=0)
        svc.start()
        assert wait_for(lambda: svc.rounds == 1)
        t0 = time.monotonic()
        assert svc.stop(timeout=5) is True
        assert time.monotonic() - t0 < 2.0  # not the hour it would have slept

    def test_wake_runs_the_next_round_now(self):
        svc = ThreadService("t-wake", LONG, lambda: None, first_delay_s=0)
        svc.start()
        assert wait_for(lambda: svc.rounds == 1)
        svc.wake()
        assert wait_for(lambda: svc.rounds == 2)
        svc.stop()

    def test_a_round_chooses_its_next_wait(self):
        class Adaptive(ThreadService):
            def round(self):
                return 0.0 if self.rounds < 5 else LONG

        svc = Adaptive("t-adapt", LONG, first_delay_s=0)
        svc.start()
        assert wait_for(lambda: svc.rounds == 6)
        time.sleep(0.02)
        assert svc.rounds == 6
        svc.stop()

    def test_stopping_is_seen_inside_a_round(self):
        inside = threading.Event()
        saw = []

        class Long(ThreadService):
            def run_once(self):
                inside.set()
                while not self.stopping:
                    time.sleep(0.001)
                saw.append(True)

        svc = Long("t-inside", LONG, first_delay_s=0)
        svc.start()
        assert inside.wait(5)
        assert svc.stop(timeout=5) and saw == [True]

    def test_a_custom_sleep_is_ended_by_interrupt(self):
        woke = threading.Event()

        class OwnWait(ThreadService):
            def sleep(self, seconds):
                woke.wait(seconds)

            def interrupt(self):
                woke.set()

        svc = OwnWait("t-own", LONG, lambda: None)
        svc.start()
        t0 = time.monotonic()
        assert svc.stop(timeout=5) and time.monotonic() - t0 < 2.0

    def test_negative_interval_is_refused(self):
        with pytest.raises(ValueError, match="interval_s"):
            ThreadService("t-bad", -1, lambda: None)


class TestAsyncService:
    def test_start_and_stop_are_idempotent(self):
        async def main():
            calls = []

            async def job():
                calls.append(1)

            svc = AsyncService("a-idem", 0.001, job)
            await svc.stop()  # never started
            svc.start()
            svc.start()
            await until(lambda: len(calls) >= 3)
            tasks = [t for t in asyncio.all_tasks() if t.get_name() == "a-idem"]
            assert len(tasks) == 1
            await svc.stop()
            await svc.stop()
            n = len(calls)
            await asyncio.sleep(0.02)
            assert len(calls) == n and not svc.running
            svc.start()
            await until(lambda: len(calls) > n)
            await svc.stop()

        asyncio.run(main())

    def test_a_failing_round_is_logged_counted_and_the_service_goes_on(self, caplog):
        async def main():
            n = [0]

            def job():  # a plain function is a job too
                n[0] += 1
                if n[0] % 2:
                    raise RuntimeError("boom")

            svc = AsyncService("a-fail", 0.001, job, log=logging.getLogger("test.asvc"))
            svc.start()
            await until(lambda: svc.errors >= 3 and svc.rounds >= 3)
            await svc.stop()
            return svc

        with caplog.at_level(logging.ERROR, logger="test.asvc"):
            svc = asyncio.run(main())
        assert svc.errors >= 3 and svc.rounds >= 3 and isinstance(svc.last_error, RuntimeError)
        assert any("a-fail: round failed" in r.getMessage() for r in caplog.records if r.name == "test.asvc")

    def test_stop_wakes_a_sleeping_service_and_cancels_a_round_in_progress(self):
        async def main():
            started = asyncio.Event()

            async def job():
                started.set()
                await asyncio.sleep(LONG)

            svc = AsyncService("a-cancel", LONG, job, first_delay_s=0)
            svc.start()
            await asyncio.wait_for(started.wait(), 5)
            t0 = time.monotonic()
            await asyncio.wait_for(svc.stop(), 5)
            assert time.monotonic() - t0 < 2.0

            idle = AsyncService("a-idle", LONG, lambda: None)
            idle.start()
            await asyncio.sleep(0.01)
            t0 = time.monotonic()
            await asyncio.wait_for(idle.stop(), 5)
            assert time.monotonic() - t0 < 2.0

        asyncio.run(main())

    def test_wake_runs_the_next_round_now(self):
        async def main():
            svc = AsyncService("a-wake", LONG, lambda: None, first_delay_s=0)
            svc.start()
            await until(lambda: svc.rounds == 1)
            svc.wake()
            await until(lambda: svc.rounds == 2)
            await svc.stop()

        asyncio.run(main())

    def test_start_from_another_thread(self):
        loop = asyncio.new_event_loop()
        th = threading.Thread(target=loop.run_forever, daemon=True)
        th.start()
        try:
            svc = AsyncService("a-thread", 0.001, lambda: None)
            svc.start(loop)
            assert wait_for(lambda: svc.rounds >= 2)
            asyncio.run_coroutine_threadsafe(svc.stop(), loop).result(5)
            n = svc.rounds
            time.sleep(0.02)
            assert svc.rounds == n
        finally:
            loop.call_soon_threadsafe(loop.stop)
            th.join(5)
            loop.close()

    def test_stop_does_not_swallow_the_callers_cancellation(self):
        async def main():
            svc = AsyncService("a-outer", LONG, lambda: None)
            svc.start()
            await asyncio.sleep(0)

            async def closer():
                await svc.stop()
                await asyncio.sleep(LONG)

            t = asyncio.get_running_loop().create_task(closer())
            await asyncio.sleep(0.01)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t

        asyncio.run(main())

    def test_a_wake_before_start_is_kept_and_a_restart_on_another_loop_works(self):
        svc = AsyncService("a-early", LONG, lambda: None)

        async def first():
            svc.wake()  # e.g. a topic changed before registration started
            svc.start()
            await until(lambda: svc.rounds == 1)  # not an hour later
            await svc.stop()

        async def again():
            svc.start()
            svc.wake()
            await until(lambda: svc.rounds == 2)
            await svc.stop()

        asyncio.run(first())
        asyncio.run(again())
