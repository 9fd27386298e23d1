"""A worker's side of the broker's connection placement (broker/shared/placement.py).

``offer`` is the listening servers' ``hand_over`` hook: given a just-accepted socket, it sends it
to the live sibling serving the fewest connections when that is fewer than this worker serves,
and says whether it did. The worker's inbox is read on the loop: each socket taken from it is
served by the server of its local port (the broker's port or its VIP port), as if accepted
here. ``count`` publishes the connections this worker serves after each open and close.
"""
from __future__ import annotations

import asyncio
import logging
import os
import socket

from shmq.broker.shared import placement
from shmq.protocol import RemotingServer

log = logging.getLogger("shmq.broker.worker")


class HandOver:
    def __init__(self, wid: int, counts: placement.ConnCounts, boxes: placement.Inboxes):
        self.wid = wid
        self.counts = counts
        self.boxes = boxes
        self.servers: list[RemotingServer] = []
        self.served = 0  # connections open on this worker's servers (both ports)
        self._loop: asyncio.AbstractEventLoop | None = None

    def offer(self, fd: int) -> bool:
        to = self.counts.fewest(self.wid, self.served)
        return to is not None and placement.send_fd(self.boxes.send[to], fd)

    def count(self, delta: int) -> None:
        self.served += delta
        self.counts.set(self.wid, self.served)

    def start(self, servers: list[RemotingServer]) -> None:
        """Serve the inbox (sockets queued before this start too: a predecessor's share) and say
        this worker is up, with its count."""
        self.servers = servers
        self._loop = asyncio.get_running_loop()
        self._loop.add_reader(self.boxes.recv[self.wid], self._take)
        self.counts.set(self.wid, self.served)
        self._take()

    def stop(self) -> None:
        """No more sockets to this worker (shutdown): siblings keep theirs; sockets queued
        already are left to the supervisor (closed when it reaps this worker)."""
        self.counts.set(self.wid, placement.DOWN)
        if self._loop is not None:
            self._loop.remove_reader(self.boxes.recv[self.wid])
            self._loop = None

    def _take(self) -> None:
        for fd in placement.take_fds(self.boxes.recv[self.wid]):
            sock = socket.socket(fileno=fd)
            port = sock.getsockname()[1] if sock.family in (socket.AF_INET, socket.AF_INET6) else None
            srv = next((s for s in self.servers if s.port == port), None)
            if srv is None:  # not one of the broker's ports: nothing to serve it with
                log.warning("worker %d: a handed-over socket on port %s; closing it", self.wid, port)
                sock.close()
                continue
            asyncio.ensure_future(self._adopt(srv, sock))

    async def _adopt(self, srv: RemotingServer, sock: socket.socket) -> None:
        try:
            await srv.adopt(sock)
        except OSError as e:  # the client went away meanwhile: it reconnects
            log.debug("worker %d: a handed-over connection failed (%s)", self.wid, e)
            sock.close()


def from_env() -> HandOver | None:
    got = placement.parse_env(os.environ.get("SHMQ_HANDOVER"))
    return None if got is None else HandOver(int(os.environ["SHMQ_WORKER_ID"]), *got)
