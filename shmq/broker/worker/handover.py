"""A worker's side of the broker's connection placement (broker/shared/placement.py).

``offer`` is the listening servers' ``hand_over`` hook: given a just-accepted socket, it sends it
to the lightest live sibling when that one is lighter than this worker (idle while this one moves
messages, or as busy with fewer connections), and says whether it did. The worker's inbox is
read on the loop: each socket taken from it is served by the server of its local port (the
broker's port or its VIP port), as if accepted here. ``count`` publishes the connections this
worker serves after each open and close; a service on the loop (shmq/service.py), the messages it
moved over the window.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
from collections.abc import Callable

from shmq.broker.shared import placement
from shmq.protocol import RemotingServer
from shmq.service import AsyncService

log = logging.getLogger("shmq.broker.worker")


class HandOver:
    def __init__(self, wid: int, loads: placement.WorkerLoads, boxes: placement.Inboxes, moved_total: Callable[[], int]):
        self.wid = wid
        self.loads = loads
        self.boxes = boxes
        self.moved_total = moved_total  # messages this worker stored and handed out, ever
        self.servers: list[RemotingServer] = []
        self.served = 0  # connections open on this worker's servers (both ports)
        self.moved = 0  # messages moved over the window, as published
        self._steps: collections.deque[int] = collections.deque(
            maxlen=round(placement.MOVED_WINDOW_S / placement.MOVED_PERIOD_S))
        self._last = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._measuring = AsyncService(f"placement-loads-w{wid}", placement.MOVED_PERIOD_S, self._measure,
                                       log=log, first_delay_s=0)
        self._adopting: set[asyncio.Task] = set()  # (held: the loop keeps only weak references)

    def offer(self, fd: int) -> bool:
        to = self.loads.lighter(self.wid, self.served, self.moved)
        return to is not None and placement.send_fd(self.boxes.send[to], fd)

    def count(self, delta: int) -> None:
        self.served += delta
        self.loads.set(self.wid, self.served, self.moved)

    def start(self, servers: list[RemotingServer]) -> None:
        """Serve the inbox (sockets queued before this start too: a predecessor's share) and say
        this worker is up, with its figures."""
        self.servers = servers
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.boxes.recv[self.wid], self._take)
        self._last = self.moved_total()
        self.loads.set(self.wid, self.served, self.moved)
        self._measuring.start()
        self._take()

    async def stop(self) -> None:
        """No more sockets to this worker (shutdown): siblings keep theirs; sockets queued
        already are left to the supervisor (closed when it reaps this worker)."""
        await self._measuring.stop()  # (first: no round of it then overwrites the DOWN below)
        self.loads.set(self.wid, placement.DOWN, 0)
        if self._loop is not None:
            self._loop.remove_reader(self.boxes.recv[self.wid])
            self._loop = None

    def _measure(self) -> None:
        total = self.moved_total()
        self._steps.append(total - self._last)
        self._last = total
        self.moved = sum(self._steps)
        self.loads.set(self.wid, self.served, self.moved)

    def _take(self) -> None:
        for fd in placement.take_fds(self.boxes.recv[self.wid]):
            sock = socket.socket(fileno=fd)
            port = sock.getsockname()[1] if sock.family in (socket.AF_INET, socket.AF_INET6) else None
            srv = next((s for s in self.servers if s.port == port), None)
            if srv is None:  # not one of the broker's ports: nothing to serve it with
                log.warning("worker %d: a handed-over socket on port %s; closing it", self.wid, port)
                sock.close()
                continue
            task = self._loop.create_task(self._adopt(srv, sock))
            self._adopting.add(task)
            task.add_done_callback(self._adopting.discard)

    async def _adopt(self, srv: RemotingServer, sock: socket.socket) -> None:
        try:
            await srv.adopt(sock)
        except OSError as e:  # the client went away meanwhile: it reconnects
            log.debug("worker %d: a handed-over connection failed (%s)", self.wid, e)
            sock.close()


def from_env(moved_total: Callable[[], int]) -> HandOver | None:
    got = placement.parse_env(os.environ.get("SHMQ_HANDOVER"))
    return None if got is None else HandOver(int(os.environ["SHMQ_WORKER_ID"]), *got, moved_total)
