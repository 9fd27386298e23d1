"""The Future an async send returns (:class:`SendFuture`): ``result(timeout)``, ``exception``,
``done``, ``add_done_callback``, the methods of ``concurrent.futures.Future``, and the send's
callback (RocketMQ's ``send(msg, SendCallback)``: ``callback(result_or_exception)``, once).

Why not ``concurrent.futures.Future``: its life (a Condition with its lock made at birth, taken
to set it running, to set the result and to read it, and a notify_all) cost ~2.5 µs per send,
more than the send's request and frame together (RESULTS, "Session 4, tcpcli"). An async send's
result is nearly always read after it is set (the caller keeps many in flight), so here no
lock is taken unless a thread has to wait: the waiter makes an Event, and whoever completes the
future sets it. It is not a ``concurrent.futures.Future`` (``concurrent.futures.wait`` and
``asyncio.wrap_future`` do not take it).

Why it is safe without a lock: the state is written after the result (under the GIL, or a
free-threaded build's per-object order), and a waiter publishes its Event before it looks at the
state again, so either the completer sees the Event or the waiter sees the state. Each callback
is taken off its list by exactly one thread (``list.pop`` is atomic), so it runs once.
"""
from __future__ import annotations

import logging
import threading
from concurrent.futures import InvalidStateError

log = logging.getLogger("shmq.client")

_PENDING, _OK, _FAILED = 0, 1, 2
_EVENTS = threading.Lock()  # only a waiting thread takes it: one Event per future


class SendFuture:
    """The result of one async send, or its error. ``callback`` (optional) is called once with
    the result or the exception, in the thread that completes the send (the client's loop
    thread for an answer from the broker)."""

    __slots__ = ("_state", "_value", "_callback", "_event", "_more")

    def __init__(self, callback=None):
        self._state = _PENDING
        self._callback = callback
        self._event = None  # an Event, once a thread waits
        self._more = None  # add_done_callback's functions, once there is one

    # ---- reading ---------------------------------------------------------------------------
    def done(self) -> bool:
        return self._state != _PENDING

    def running(self) -> bool:
        """A send is running from its submission to its answer (it cannot be cancelled)."""
        return self._state == _PENDING

    def cancelled(self) -> bool:
        return False

    def cancel(self) -> bool:
        """False: a send handed to the connection cannot be withdrawn (as a running
        ``concurrent.futures.Future``)."""
        return False

    def set_running_or_notify_cancel(self) -> bool:
        return True

    def result(self, timeout: float | None = None):
        if self._state == _PENDING:
            self._wait(timeout)
        if self._state == _OK:
            return self._value
        raise self._value

    def exception(self, timeout: float | None = None) -> BaseException | None:
        if self._state == _PENDING:
            self._wait(timeout)
        return self._value if self._state == _FAILED else None

    def _wait(self, timeout: float | None) -> None:
        ev = self._event
        if ev is None:
            with _EVENTS:
                ev = self._event
                if ev is None:
                    ev = self._event = threading.Event()
        # the Event is published: a completion from now on sets it; one before shows in _state
        if self._state == _PENDING and not ev.wait(timeout) and self._state == _PENDING:
            raise TimeoutError(f"send not answered within {timeout}s")

    def add_done_callback(self, fn) -> None:
        """``fn(self)`` once the send is done (now, if it is)."""
        more = self._more
        if more is None:
            with _EVENTS:
                more = self._more
                if more is None:
                    more = self._more = []
        more.append(fn)
        if self._state != _PENDING:
            self._run_more()

    # ---- completing (the client's loop thread, or the caller for a send done at once) ------
    def set_result(self, result) -> None:
        if self._state != _PENDING:
            raise InvalidStateError("the send is done already")
        self._value = result
        self._state = _OK
        self._finish(result)

    def set_exception(self, exc: BaseException) -> None:
        if self._state != _PENDING:
            raise InvalidStateError("the send is done already")
        self._value = exc
        self._state = _FAILED
        self._finish(exc)

    def _finish(self, value) -> None:
        ev = self._event
        if ev is not None:
            ev.set()
        cb = self._callback
        if cb is not None:
            self._callback = None
            try:
                cb(value)
            except Exception as e:  # noqa: BLE001 - a callback's error is the caller's, not the send's
                callback_raised(cb, e)
        if self._more is not None:
            self._run_more()

    def _run_more(self) -> None:
        more = self._more
        while True:
            try:
                fn = more.pop(0)
            except IndexError:
                return
            try:
                fn(self)
            except Exception:  # noqa: BLE001
                log.exception("future callback %r raised", fn)

    def __repr__(self) -> str:
        state = ("pending", "finished", "failed")[self._state]
        return f"<SendFuture {state}>"


def callback_raised(cb, e: Exception) -> None:
    """A send's callback raised ``e``: logged with its traceback, the send's outcome unchanged
    (SendFuture._finish, and native/remote_answer.c's, which runs the callback of a send its
    answer completes)."""
    log.error("send callback %r raised", cb, exc_info=e)


def done_future(callback, value) -> SendFuture:
    """The future of an async send done at once (a local send's result, or an error raised before
    anything was sent), its callback called."""
    fut = SendFuture(callback)
    if isinstance(value, BaseException):
        fut.set_exception(value)
    else:
        fut.set_result(value)
    return fut


__all__ = ["SendFuture", "done_future"]
