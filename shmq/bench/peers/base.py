"""The adapter interface: what shmq and each peer provide so the engine can move the same
messages through them.

Parent side (the harness process): ``skip_reason`` (why this system cannot run this
scenario here, or None), ``setup`` (start what the run needs: a server, a queue, a store
owner; returns a picklable *channel* handed to every child), ``service_pids`` (server
processes whose CPU counts as "broker"), ``teardown`` (stop and remove all of it, always).

Child side (spawned producer and consumer processes): ``open_sender(channel, scenario, idx)``
and ``open_receiver(channel, scenario, idx)``, class methods importable in a fresh
interpreter. A sender has ``send(body)``, optionally ``send_batch(bodies)``, and
``close()``. A receiver either has ``recv(timeout_s) -> list of bodies`` (pull style) or
``start(handle)`` (push style: a client thread calls ``handle(bodies)``), and ``close()``.
"""
from __future__ import annotations

from typing import Any, Callable, Protocol

from ..scenarios import Scenario


class Sender(Protocol):
    def send(self, body: bytes) -> Any: ...
    def close(self) -> None: ...


class Receiver(Protocol):
    def close(self) -> None: ...


class Peer:
    #: row name in the table and --peers
    name = "?"
    #: one line for the table notes
    description = ""
    #: True for shmq's own rows (ratios are shmq row / peer row)
    is_shmq = False
    #: can answer only once the message is on disk (sync-flush)
    durable = False

    def skip_reason(self, sc: Scenario, env) -> str | None:
        if sc.durable and not self.durable:
            return "no durability (nothing to fsync)"
        if sc.groups > 1 and not self.is_shmq:
            return "no consumer groups here (each message goes to one consumer)"
        return None

    def setup(self, sc: Scenario, env, tmpdir: str) -> Any:
        return None

    def service_pids(self) -> list[int]:
        return []

    def teardown(self) -> None:
        pass

    # ---- child side ----------------------------------------------------------------
    @classmethod
    def open_sender(cls, channel: Any, sc: Scenario, idx: int) -> Sender:
        raise NotImplementedError

    @classmethod
    def open_receiver(cls, channel: Any, sc: Scenario, idx: int) -> Receiver:
        raise NotImplementedError


class ServerPeer(Peer):
    """A peer whose rows go through one server process it starts in ``setup`` (redis-server, the
    tcp-limit echo): it records the pid and the Env that spawned it, reports the pid as the
    row's service (its CPU is the "broker" column) and stops it by pid at teardown."""

    def __init__(self):
        self._pid: int | None = None
        self._env = None

    def service_pids(self) -> list[int]:
        return [self._pid] if self._pid else []

    def teardown(self) -> None:
        if self._pid is not None and self._env is not None:
            self._env.stop_process(self._pid)
            self._pid = None


class FuncSender:
    """A sender from plain callables."""

    __slots__ = ("send", "send_batch", "_close")

    def __init__(self, send: Callable, send_batch: Callable | None = None, close: Callable | None = None):
        self.send = send
        self.send_batch = send_batch
        self._close = close

    def close(self) -> None:
        if self._close is not None:
            self._close()


class FuncReceiver:
    """A pull-style receiver from plain callables."""

    __slots__ = ("recv", "_close")

    def __init__(self, recv: Callable[[float], list], close: Callable | None = None):
        self.recv = recv
        self._close = close

    def close(self) -> None:
        if self._close is not None:
            self._close()
