"""The one background-service pattern: a job run in rounds until stopped.

Every periodic job of shmq (flush, index dispatch, cleanup, delay delivery, transaction
check-back, NameServer registration, housekeeping, client heartbeats, rebalance, offset
persistence, the NameServer's liveness scan, connection sweeps, a broker worker's published
load) is a service of one of two flavours with the same life:

- :class:`ThreadService` runs on its own daemon thread (jobs that block: disk, futexes);
- :class:`AsyncService` runs as a task on an asyncio loop (jobs that await the network).

The life of both::

    svc.start()        # idempotent; a stopped service may be started again
    svc.wake()         # run the next round now instead of at the end of the wait
    svc.stop()         # idempotent; ThreadService: returns once the thread ended
    await svc.stop()   # AsyncService: cancels a round in progress, returns once the task ended

A round is ``round()``: by default ``job()`` (given to the constructor) or ``run_once()``
(a subclass's), then a wait of ``interval_s``; a round may return the seconds to wait
instead (a service that knows when work comes due). The first round comes after
``first_delay_s`` (default: one interval; 0 runs it at once).

Errors: a round that raises is logged (``log``, at ``error_level``; with the traceback when
that is WARNING or above), counted in ``errors`` and kept in ``last_error``; the next round
comes after ``error_delay_s`` (default: one interval). The service never dies of an
exception its job raises; ``rounds`` counts the rounds that completed.

Stop wakes a sleeping service at once: a thread's wait is an Event (or, for a service that
sleeps elsewhere, e.g. on a store futex, its own ``sleep``/``interrupt`` pair), a task's wait
is cancelled. A round in progress sees ``stopping`` and may cut itself short.

This module imports only the standard library, so every layer may use it.
"""
from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import inspect
import logging
import sys
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["AsyncService", "ThreadService", "name_os_thread"]

_log = logging.getLogger("shmq.service")

_PR_SET_NAME = 15
try:
    _prctl = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl if sys.platform == "linux" \
        else None
except (OSError, AttributeError):  # pragma: no cover - no libc prctl: the threads keep the process's name
    _prctl = None


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` in the kernel too (its first 15 bytes: /proc's comm,
    ``top -H``, perf and bench/thread_stats.py show it; Python 3.11 names only its own object).
    A no-op where prctl is missing."""
    if _prctl is not None:
        _prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


class _Rounds:
    """What both flavours share: the round, its error reporting, the counters."""

    def __init__(self, name: str, interval_s: float, job: Callable[[], Any] | None, *,
                 log: logging.Logger | None, first_delay_s: float | None,
                 error_delay_s: float | None, error_level: int):
        if interval_s < 0:
            raise ValueError(f"{name}: interval_s must be >= 0, not {interval_s}")
        self.name = name
        self.interval_s = interval_s
        self._job = job
        self.log = log or _log
        self.first_delay_s = interval_s if first_delay_s is None else first_delay_s
        self.error_delay_s = interval_s if error_delay_s is None else error_delay_s
        self.error_level = error_level
        self.rounds = 0
        self.errors = 0
        self.last_error: BaseException | None = None

    def run_once(self) -> Any:  # pragma: no cover - a subclass's job, unless one is given
        raise NotImplementedError(f"{type(self).__name__}: pass job= or define run_once()")

    def job(self) -> Any:
        return self._job() if self._job is not None else self.run_once()

    def _failed(self, e: Exception) -> float:
        self.errors += 1
        self.last_error = e
        if self.error_level >= logging.WARNING:
            self.log.log(self.error_level, "%s: round failed", self.name, exc_info=e)
        else:
            self.log.log(self.error_level, "%s: round failed: %s", self.name, e)
        return self.error_delay_s

    def _next_wait(self, wait: float | None) -> float:
        self.rounds += 1
        return self.interval_s if wait is None else max(0.0, wait)


class ThreadService(_Rounds):
    """A service on its own daemon thread. ``round()`` returns the wait before the next
    round (None: ``interval_s``); override ``sleep``/``interrupt`` together to wait on
    something other than the service's Event (``interrupt`` must end a ``sleep`` at once)."""

    def __init__(self, name: str, interval_s: float, job: Callable[[], Any] | None = None, *,
                 log: logging.Logger | None = None, first_delay_s: float | None = None,
                 error_delay_s: float | None = None, error_level: int = logging.ERROR):
        super().__init__(name, interval_s, job, log=log, first_delay_s=first_delay_s,
                         error_delay_s=error_delay_s, error_level=error_level)
        self._wake_evt = threading.Event()
        self._stop_evt = threading.Event()
        self._thread: threading.Thread | None = None
        self._life = threading.Lock()  # start/stop from several threads at once

    # ---- life -------------------------------------------------------------------------------
    def start(self) -> None:
        with self._life:
            if self._thread is not None:
                return
            self._stop_evt.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop and wait for the thread (at most ``timeout`` s); True once it has ended. A
        thread still running after the timeout stays registered: a later ``stop`` waits again."""
        with self._life:
            t = self._thread
            if t is None:
                return True
            self._stop_evt.set()
            self.interrupt()
            if t is not threading.current_thread():
                t.join(timeout)
            if t.is_alive():
                return False
            self._thread = None
            return True

    def wake(self) -> None:
        self._wake_evt.set()
        self.interrupt()

    @property
    def running(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        return self._stop_evt.is_set()

    # ---- the loop -----------------------------------------------------------------------------
    def round(self) -> float | None:
        self.job()
        return None

    def sleep(self, seconds: float) -> None:
        self._wake_evt.wait(seconds)

    def interrupt(self) -> None:
        self._wake_evt.set()

    def _run(self) -> None:
        name_os_thread(self.name)
        # Bound once: this loop is the flush thread's, once per group commit. A service that
        # keeps the default round() runs its job directly (and ignores what the job returns).
        stopped, woken, sleep = self._stop_evt.is_set, self._wake_evt, self.sleep
        plain = type(self).round is ThreadService.round
        round_ = (self._job or self.run_once) if plain else self.round
        interval = self.interval_s
        wait = self.first_delay_s
        while not stopped():
            if wait > 0:
                sleep(wait)
                if stopped():
                    break
            if woken.is_set():
                woken.clear()  # a wake() from now on means "once more after this round"
            try:
                w = round_()
                self.rounds += 1
                wait = interval if plain or w is None else max(0.0, w)
            except Exception as e:  # noqa: BLE001 - a service must not die of its job
                wait = self._failed(e)


class AsyncService(_Rounds):
    """A service as a task on an asyncio loop. ``job``/``run_once``/``round`` may be plain
    functions or coroutine functions. ``start(loop)`` may be called from any thread when
    ``loop`` is given (the task is created on that loop); ``stop()`` and ``wake()`` run on
    the loop."""

    def __init__(self, name: str, interval_s: float, job: Callable[[], Any] | None = None, *,
                 log: logging.Logger | None = None, first_delay_s: float | None = None,
                 error_delay_s: float | None = None, error_level: int = logging.ERROR):
        super().__init__(name, interval_s, job, log=log, first_delay_s=first_delay_s,
                         error_delay_s=error_delay_s, error_level=error_level)
        # Made here, so a wake() before start() is not lost (asyncio.Event binds to a loop
        # only when first waited on).
        self._wake_evt = asyncio.Event()
        self._evt_loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping = False

    # ---- life -------------------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop | None = None) -> None:
        if self._loop is not None:
            return
        self._stopping = False
        self._loop = loop or asyncio.get_running_loop()
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            self._spawn()
        else:
            self._loop.call_soon_threadsafe(self._spawn)

    def _spawn(self) -> None:
        if self._stopping or self._task is not None:
            return
        if self._evt_loop not in (None, self._loop):  # restarted on another loop
            pending = self._wake_evt.is_set()
            self._wake_evt = asyncio.Event()
            if pending:
                self._wake_evt.set()
        self._evt_loop = self._loop
        self._task = self._loop.create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the service (a round in progress ends at its next await) and wait for it."""
        self._stopping = True
        task, self._task = self._task, None
        self._loop = None
        if task is None or task is asyncio.current_task():
            return
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if asyncio.current_task() is not None and asyncio.current_task().cancelling():
                raise  # our own caller is being cancelled, not just the service

    def wake(self) -> None:
        """Run the next round now (also when called before start: the first round is then
        not delayed)."""
        self._wake_evt.set()

    @property
    def running(self) -> bool:
        return self._loop is not None

    @property
    def stopping(self) -> bool:
        return self._stopping

    # ---- the loop -----------------------------------------------------------------------------
    async def round(self) -> float | None:
        r = self.job()
        if inspect.isawaitable(r):
            await r
        return None

    async def _run(self) -> None:
        wait = self.first_delay_s
        evt = self._wake_evt
        while not self._stopping:
            if wait > 0:
                try:
                    await asyncio.wait_for(evt.wait(), wait)
                except asyncio.TimeoutError:
                    pass
            evt.clear()
            try:
                r = self.round()
                wait = self._next_wait(await r if inspect.isawaitable(r) else r)
            except Exception as e:  # noqa: BLE001 - a service must not die of its job
                wait = self._failed(e)
