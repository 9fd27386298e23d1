"""Which worker serves a client connection: the broker's choice, not the kernel's.

Every worker listens on the broker's ports with SO_REUSEPORT, and the kernel's hash of each
connection's 4-tuple picks the worker that accepts it: with two workers, a producer's and a
consumer's connections share one about half the time, and the sync ``send()`` + PushConsumer
row ran 7,654/s median on one worker against 9,761/s on two (bench/RESULTS.md, "Session 16,
worker16"; "Session 17, place17"). So the worker that accepts a connection hands the
just-accepted socket (nothing read from it yet) to a live sibling that is lighter: not moving
messages while the acceptor is, or, as busy, serving fewer connections. Busy first: a client
process may hold idle connections beside its busy one (the Python producer's sync sends have a
connection of their own beside its instance's), so connection counts alone would tie a
producer's worker with an idle one and leave the next client to the kernel's hash.

What the processes share, all made by the supervisor at start and kept across worker restarts:

* one ``SOCK_DGRAM`` unix socket pair per worker (its *inbox*): siblings send an accepted
  socket's fd on the send end (SCM_RIGHTS, one fd a datagram); the worker takes them from the
  receive end. The supervisor holds both ends, so fds queued for a worker that died stay
  queued: the supervisor closes them when it reaps the worker (their clients see the
  connection close and reconnect), and a restarted worker serves any sent after that.
* a memfd of two signed 64-bit slots per worker (``WorkerLoads``), written by that worker only:
  the connections it serves (after each open and close; -1 while it is down: the supervisor
  writes that when it reaps the worker, the worker its count once it serves) and the messages
  it stored and handed out over the last few seconds (``MOVED_WINDOW_S``, refreshed on its
  loop every ``MOVED_PERIOD_S``). A reader may see figures a moment old: the placement is a
  balance, not a guarantee, and every connection is served either way.

``SHMQ_HANDOVER`` (``loads_fd;wid:recv_fd:send_fd,...``) passes them to each worker; a broker
of one worker, or ``SHMQ_HANDOVER=0`` in the supervisor's environment, hands nothing over (the
kernel's placement, as before).
"""
from __future__ import annotations

import mmap
import os
import socket
import struct

__all__ = ["WorkerLoads", "Inboxes", "create", "parse_env", "env_value", "DOWN", "BUSY"]

#: A worker's connection slot while it is down (not started yet, or reaped).
DOWN = -1
#: Messages moved over the window from which a worker counts as busy.
BUSY = 64
MOVED_PERIOD_S = 0.5
MOVED_WINDOW_S = 3.0
_SLOT = struct.Struct("=q")


class WorkerLoads:
    """Two signed 64-bit slots per worker id (1..n) in a shared memfd, connections then messages
    moved; id 0's unused."""

    def __init__(self, fd: int, n: int):
        self.fd = fd
        self.n = n
        self._map = mmap.mmap(fd, 2 * _SLOT.size * (n + 1))

    @classmethod
    def create(cls, n: int) -> "WorkerLoads":
        fd = os.memfd_create("shmq-worker-loads", os.MFD_CLOEXEC)
        os.ftruncate(fd, 2 * _SLOT.size * (n + 1))
        loads = cls(fd, n)
        for wid in range(1, n + 1):
            loads.set(wid, DOWN, 0)
        return loads

    def set(self, wid: int, conns: int, moved: int) -> None:
        # aligned 8-byte stores: a reader in another process sees each old or new
        _SLOT.pack_into(self._map, 2 * _SLOT.size * wid, conns)
        _SLOT.pack_into(self._map, 2 * _SLOT.size * wid + _SLOT.size, moved)

    def get(self, wid: int) -> tuple[int, int]:
        """(connections, messages moved over the window) of worker ``wid``."""
        return (_SLOT.unpack_from(self._map, 2 * _SLOT.size * wid)[0],
                _SLOT.unpack_from(self._map, 2 * _SLOT.size * wid + _SLOT.size)[0])

    def lighter(self, own: int, conns: int, moved: int) -> int | None:
        """The lightest live sibling, if it is lighter than worker ``own`` with ``conns``
        connections and ``moved`` messages: idle (below ``BUSY``) beats busy, then fewer
        connections. None: keep the connection (a tie keeps it too)."""
        best, best_key = None, (moved >= BUSY, conns)
        for wid in range(1, self.n + 1):
            if wid != own:
                c, m = self.get(wid)
                key = (m >= BUSY, c)
                if c > DOWN and key < best_key:
                    best, best_key = wid, key
        return best

    def close(self) -> None:
        self._map.close()
        os.close(self.fd)


class Inboxes:
    """Each worker's inbox: ``recv[wid]`` and ``send[wid]`` are the two ends' fds."""

    def __init__(self, recv: dict[int, int], send: dict[int, int]):
        self.recv = recv
        self.send = send

    @classmethod
    def create(cls, wids: list[int]) -> "Inboxes":
        recv, send = {}, {}
        for wid in wids:
            r, s = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
            r.setblocking(False)
            s.setblocking(False)  # a full inbox refuses at once (EAGAIN): the sender keeps the connection
            recv[wid], send[wid] = r.detach(), s.detach()
        return cls(recv, send)

    def close(self) -> None:
        for fd in (*self.recv.values(), *self.send.values()):
            s = _socks.pop(fd, None)
            if s is not None:
                s.detach()  # (the fd is closed once, below)
            os.close(fd)


def create(wids: list[int]) -> tuple[WorkerLoads, Inboxes]:
    """The supervisor's shared pieces for workers ``wids`` (1..n)."""
    return WorkerLoads.create(max(wids)), Inboxes.create(wids)


def env_value(loads: WorkerLoads, boxes: Inboxes) -> str:
    """``SHMQ_HANDOVER`` for a worker (every worker gets all of them; it uses its own receive
    end and its siblings' send ends)."""
    return f"{loads.fd};" + ",".join(f"{w}:{boxes.recv[w]}:{boxes.send[w]}" for w in sorted(boxes.recv))


def fds(loads: WorkerLoads, boxes: Inboxes) -> tuple[int, ...]:
    """The fds :func:`env_value` names (the worker's ``pass_fds``)."""
    return (loads.fd, *boxes.recv.values(), *boxes.send.values())


def parse_env(value: str | None) -> tuple[WorkerLoads, Inboxes] | None:
    """The worker's side of :func:`env_value`; None when there is none (one worker, or off)."""
    if not value or value == "0":
        return None
    loads_fd, _, rest = value.partition(";")
    recv, send = {}, {}
    for item in rest.split(","):
        wid, r, s = (int(x) for x in item.split(":"))
        recv[wid], send[wid] = r, s
    return WorkerLoads(int(loads_fd), max(recv)), Inboxes(recv, send)


def send_fd(send_end: int, fd: int) -> bool:
    """Queue ``fd`` (a duplicate travels; the caller still closes its own) in an inbox. False
    when the inbox is full or gone: the caller keeps the connection."""
    try:
        socket.send_fds(_sock(send_end), [b"h"], [fd])
    except OSError:
        return False
    return True


def take_fds(recv_end: int) -> list[int]:
    """Every fd queued in an inbox now (non-blocking)."""
    out: list[int] = []
    sock = _sock(recv_end)
    while True:
        try:
            _msg, got, _flags, _addr = socket.recv_fds(sock, 16, 1)
        except (BlockingIOError, InterruptedError):
            return out
        for fd in got:  # close-on-exec as every fd the worker opens itself (3.11's recv_fds drops its flags)
            os.set_inheritable(fd, False)
        out.extend(got)


_socks: dict[int, socket.socket] = {}


def _sock(fd: int) -> socket.socket:
    """A socket object over an inherited fd, made once (it owns nothing: never closed here)."""
    s = _socks.get(fd)
    if s is None:
        s = _socks[fd] = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM, fileno=fd)
    return s

