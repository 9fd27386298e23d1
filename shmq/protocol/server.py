"""A generic RocketMQ remoting server on asyncio.

Usage::

    async def route(conn: Connection, cmd: RemotingCommand) -> RemotingCommand | None:
        hdr = GetRouteInfoRequestHeader.from_ext(cmd.ext_fields)
        return cmd.make_response(body=...)

    server = RemotingServer({RequestCode.GET_ROUTEINFO_BY_TOPIC: route}, "127.0.0.1", 0)
    await server.start()
    print(server.port)               # the real port when 0 was asked for
    ...
    await server.close()

Handlers (``async def handle(conn, cmd) -> RemotingCommand | None``, or a plain function
returning the same) get the :class:`~shmq.protocol.transport.Connection` and the request.
What they return is sent as the response: its opaque, response flag and serialize type are
filled in from the request, so ``cmd.make_response(...)`` or a fresh ``RemotingCommand``
both work. ``None`` sends nothing (RocketMQ processors do the same); oneway requests are
never answered. An exception becomes an answer: a :class:`~shmq.errors.ShmqError` with its
``code`` and ``remark``, anything else SYSTEM_ERROR (1) with the exception text. A request
code without a handler is answered REQUEST_CODE_NOT_SUPPORTED (3), remark
``" request type N not supported"``, unless a ``default_handler`` is given.

The server can call its clients too: ``await conn.send_request(cmd, timeout)`` or
``conn.send_oneway(cmd)`` on any connection it holds (``server.connections``). ``on_connect``
and ``on_close`` hooks see every connection come and go; ``on_close`` runs once, after
pending requests on that connection failed and its running handlers were cancelled.
"""
from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable, Mapping
from typing import Any

from shmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE
from shmq.protocol.transport import Connection, FastFrames, Handler, Limits, sweeper
from shmq.service import AsyncService

log = logging.getLogger("shmq.remoting")

__all__ = ["RemotingServer"]


class RemotingServer:
    """Listens on ``host:port`` and serves remoting requests with ``handlers`` (code -> handler).

    Keyword settings: ``reuse_port`` (SO_REUSEPORT, so several worker processes share a
    port), ``max_frame_size`` (16 MiB), ``idle_timeout`` (close a connection silent this long,
    120 s; ``None`` never), ``frame_timeout`` (close a connection whose frame stays incomplete
    this long, 30 s), ``max_connections`` and ``max_connections_per_peer`` (per remote IP;
    further connections are closed at once; ``None`` = no per-peer bound),
    ``max_inflight`` / ``max_inflight_bytes`` (per connection, reading pauses beyond them),
    ``backlog``, ``name`` (for logs), ``fast`` (a fast path for the common requests, given to
    every connection: see transport.py), ``hand_over`` (given each accepted socket's fd before
    anything is read from it; True: it took the socket, e.g. sent it to another process, and
    this server drops its own copy unread, the connection never counted nor hooked here).
    :meth:`adopt` serves a socket another process accepted.
    """

    def __init__(
        self,
        handlers: Mapping[int, Handler] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        reuse_port: bool = False,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout: float | None = 120.0,
        frame_timeout: float = 30.0,
        max_connections: int = 10_000,
        max_connections_per_peer: int | None = None,
        max_inflight: int = 1024,
        max_inflight_bytes: int = 64 * 1024 * 1024,
        default_handler: Handler | None = None,
        on_connect: Callable[[Connection], Any] | None = None,
        on_close: Callable[[Connection], Any] | None = None,
        backlog: int = 1024,
        name: str = "remoting",
        fast: FastFrames | None = None,
        hand_over: Callable[[int], bool] | None = None,
    ):
        self.fast = fast
        self.hand_over = hand_over
        self.handlers: dict[int, Handler] = dict(handlers or {})
        self.host = host
        self.port = port
        self.reuse_port = reuse_port
        self.limits = Limits(
            max_frame_size=max_frame_size,
            max_inflight=max_inflight,
            max_inflight_bytes=max_inflight_bytes,
            frame_timeout=frame_timeout,
            idle_timeout=idle_timeout,
        )
        self.max_connections = max_connections
        self.max_connections_per_peer = max_connections_per_peer
        self.default_handler = default_handler
        self.on_connect = on_connect
        self.on_close = on_close
        self.backlog = backlog
        self.name = name
        self.connections: set[Connection] = set()
        self._server: asyncio.AbstractServer | None = None
        self._stop = asyncio.Event()
        self._sweeper: AsyncService | None = None

    def register(self, code: int, handler: Handler) -> None:
        """Add or replace the handler of one request code (also while running)."""
        self.handlers[code] = handler

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    # ---- life ------------------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        kwargs: dict[str, Any] = {"backlog": self.backlog, "reuse_address": True}
        if self.reuse_port:
            kwargs["reuse_port"] = True
        self._server = await loop.create_server(self._make_connection, self.host, self.port, **kwargs)
        sock = self._server.sockets[0]
        self.port = sock.getsockname()[1]
        for s in self._server.sockets:
            try:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover - not TCP
                pass
        period = max(0.05, min(1.0, self.limits.frame_timeout / 4, (self.limits.idle_timeout or 4.0) / 4))
        self._sweeper = sweeper(lambda: list(self.connections), period, self.name)
        self._sweeper.start()
        log.info("%s server listening on %s", self.name, self.address)

    async def serve_forever(self) -> None:
        if self._server is None:
            await self.start()
        await self._stop.wait()

    async def close(self) -> None:
        """Stop listening, close every connection and wait until they are gone."""
        self._stop.set()
        if self._server is not None:
            self._server.close()
        conns = list(self.connections)
        for c in conns:
            c.close()
        for c in conns:
            try:
                await asyncio.wait_for(c.wait_closed(), 2.0)
            except asyncio.TimeoutError:
                c.abort()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        if self._sweeper is not None:
            await self._sweeper.stop()
            self._sweeper = None

    async def __aenter__(self) -> "RemotingServer":
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ---- connections -------------------------------------------------------------------------
    def _make_connection(self) -> Connection:
        return _ServerConnection(self)

    async def adopt(self, sock: socket.socket) -> None:
        """Serve a connection accepted elsewhere (its socket handed over, nothing read yet) as
        if this server had accepted it; it is not offered to ``hand_over`` again."""
        await asyncio.get_running_loop().connect_accepted_socket(
            lambda: _ServerConnection(self, handed=True), sock)

    def _opened(self, conn: Connection) -> bool:
        if len(self.connections) >= self.max_connections:
            log.warning("%s: %d connections already, refusing %s", self.name, len(self.connections), conn.peer)
            return False
        if self.max_connections_per_peer is not None:
            host = conn.peer.rpartition(":")[0]
            same = sum(1 for c in self.connections if c.peer.rpartition(":")[0] == host)
            if same >= self.max_connections_per_peer:
                log.warning("%s: %d connections from %s already, refusing another", self.name, same, host)
                return False
        self.connections.add(conn)
        if self.on_connect is not None:
            try:
                self.on_connect(conn)
            except Exception:
                log.exception("%s: on_connect hook failed", self.name)
        return True

    def _closed(self, conn: Connection) -> None:
        self.connections.discard(conn)
        if self.on_close is not None:
            self.on_close(conn)


class _ServerConnection(Connection):
    def __init__(self, server: RemotingServer, handed: bool = False):
        super().__init__(
            server.handlers,
            server.limits,
            default_handler=server.default_handler,
            on_close=server._closed,
            name=server.name,
        )
        self._server = server
        self.fast = server.fast
        self._handed = handed

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if sock is not None and not self._handed and self._server.hand_over is not None \
                and self._server.hand_over(sock.fileno()):
            # Both loops start reading a new transport only after connection_made (a call queued
            # behind it; uvloop: once it returned), so nothing was read: the taker's copy of the
            # socket carries the whole stream. Closing ours sends nothing (another fd holds it).
            self.closed = True  # never counted, so no on_close either
            transport.abort()
            return
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:  # pragma: no cover
                pass
        if not self._server._opened(self):
            self.closed = True  # never counted, so no on_close either
            transport.close()
