"""Which worker serves a client connection: the broker's choice, not the kernel's.

Every worker listens on the broker's ports with SO_REUSEPORT, and the kernel's hash of each
connection's 4-tuple picks the worker that accepts it: with two workers, a producer's and a
consumer's connections share one about half the time, and the sync ``send()`` + PushConsumer
row ran 7,654/s median on one worker against 9,761/s on two (bench/RESULTS.md, "Session 16,
worker16"; "Session 17, place17"). So the worker that accepts a connection while a live sibling
serves fewer connections hands the just-accepted socket (nothing read from it yet) to that
sibling, and connections spread over the workers as they arrive.

What the processes share, all made by the supervisor at start and kept across worker restarts:

* one ``SOCK_DGRAM`` unix socket pair per worker (its *inbox*): siblings send an accepted
  socket's fd on the send end (SCM_RIGHTS, one fd a datagram); the worker takes them from the
  receive end. The supervisor holds both ends, so fds queued for a worker that died stay
  queued: the supervisor closes them when it reaps the worker (their clients see the
  connection close and reconnect), and a restarted worker serves any sent after that.
* a memfd of one signed 64-bit slot per worker (``ConnCounts``): the connections the worker
  serves, written by that worker only (its count after each open and close), -1 while it is
  down (the supervisor writes that when it reaps the worker; the worker writes its count once
  it serves). A reader may see a count a few connections old: the placement is a balance, not
  a guarantee, and every connection is served either way.

``SHMQ_HANDOVER`` (``counts_fd;wid:recv_fd:send_fd,...``) passes them to each worker; a broker
of one worker, or ``SHMQ_HANDOVER=0`` in the supervisor's environment, hands nothing over (the
kernel's placement, as before).
"""
from __future__ import annotations

import mmap
import os
import socket
import struct

__all__ = ["ConnCounts", "Inboxes", "create", "parse_env", "env_value", "DOWN"]

#: A worker's slot while it is down (not started yet, or reaped).
DOWN = -1
_SLOT = struct.Struct("=q")


class ConnCounts:
    """One signed 64-bit slot per worker id (1..n) in a shared memfd; slot 0 unused."""

    def __init__(self, fd: int, n: int):
        self.fd = fd
        self.n = n
        self._map = mmap.mmap(fd, _SLOT.size * (n + 1))

    @classmethod
    def create(cls, n: int) -> "ConnCounts":
        fd = os.memfd_create("shmq-conn-counts", os.MFD_CLOEXEC)
        os.ftruncate(fd, _SLOT.size * (n + 1))
        counts = cls(fd, n)
        for wid in range(1, n + 1):
            counts.set(wid, DOWN)
        return counts

    def set(self, wid: int, value: int) -> None:
        # an aligned 8-byte store: a reader in another process sees the old or the new value
        _SLOT.pack_into(self._map, _SLOT.size * wid, value)

    def get(self, wid: int) -> int:
        return _SLOT.unpack_from(self._map, _SLOT.size * wid)[0]

    def fewest(self, own: int, own_count: int) -> int | None:
        """The live sibling serving the fewest connections, if it serves fewer than ``own_count``;
        else None (keep the connection)."""
        best, best_count = None, own_count
        for wid in range(1, self.n + 1):
            if wid != own:
                c = self.get(wid)
                if DOWN < c < best_count:
                    best, best_count = wid, c
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


def create(wids: list[int]) -> tuple[ConnCounts, Inboxes]:
    """The supervisor's shared pieces for workers ``wids`` (1..n)."""
    return ConnCounts.create(max(wids)), Inboxes.create(wids)


def env_value(counts: ConnCounts, boxes: Inboxes) -> str:
    """``SHMQ_HANDOVER`` for a worker (every worker gets all of them; it uses its own receive
    end and its siblings' send ends)."""
    return f"{counts.fd};" + ",".join(f"{w}:{boxes.recv[w]}:{boxes.send[w]}" for w in sorted(boxes.recv))


def fds(counts: ConnCounts, boxes: Inboxes) -> tuple[int, ...]:
    """The fds :func:`env_value` names (the worker's ``pass_fds``)."""
    return (counts.fd, *boxes.recv.values(), *boxes.send.values())


def parse_env(value: str | None) -> tuple[ConnCounts, Inboxes] | None:
    """The worker's side of :func:`env_value`; None when there is none (one worker, or off)."""
    if not value or value == "0":
        return None
    counts_fd, _, rest = value.partition(";")
    recv, send = {}, {}
    for item in rest.split(","):
        wid, r, s = (int(x) for x in item.split(":"))
        recv[wid], send[wid] = r, s
    return ConnCounts(int(counts_fd), max(recv)), Inboxes(recv, send)


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
        out.extend(got)


_socks: dict[int, socket.socket] = {}


def _sock(fd: int) -> socket.socket:
    """A socket object over an inherited fd, made once (it owns nothing: never closed here)."""
    s = _socks.get(fd)
    if s is None:
        s = _socks[fd] = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM, fileno=fd)
    return s

