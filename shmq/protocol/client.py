"""Remoting clients: :class:`RemotingClient` (asyncio) and :class:`SyncRemotingClient` (blocking).

``RemotingClient(addr)`` keeps one connection to ``addr`` (RocketMQ clients multiplex
everything on one socket per server), opens it on first use and again after it closed::

    async with RemotingClient("127.0.0.1:9876") as c:
        resp = await c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="T"), timeout=3)
        await c.invoke_oneway(request(RequestCode.UNREGISTER_CLIENT, ...))

Requests the server sends on that connection (NOTIFY_CONSUMER_IDS_CHANGED and the like)
go to ``handlers``, with the same rules as on a server.

``SyncRemotingClient`` is a small blocking client for tests and command-line tools: one
request at a time on a plain socket; it can also send raw bytes (bad-input tests).
"""
from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Callable, Mapping
from typing import Any

from shmq.errors import RemotingClosed, RemotingConnectError, RemotingTimeout
from shmq.protocol import read_native
from shmq.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE
from shmq.protocol.command import RemotingCommand, decode_command, encode_command
from shmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from shmq.protocol.transport import ClientConnection, Connection, FastFrames, Handler, Limits, sweeper
from shmq.service import AsyncService

__all__ = ["RemotingClient", "SyncRemotingClient", "parse_addr"]


def parse_addr(addr: str) -> tuple[str, int]:
    """``"host:port"`` or ``"[v6]:port"`` -> ``(host, port)``."""
    host, _, port = addr.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be host:port, got {addr!r}")
    return host.strip("[]"), int(port)


class RemotingClient:
    """An asyncio client of one remoting server. Safe to share between tasks."""

    def __init__(
        self,
        addr: str,
        *,
        handlers: Mapping[int, Handler] | None = None,
        connect_timeout: float = 3.0,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        idle_timeout: float | None = None,
        frame_timeout: float = 30.0,
        on_close: Callable[[Connection], Any] | None = None,
        name: str = "client",
        rpc_hook: Callable[[RemotingCommand], Any] | None = None,
        fast: FastFrames | None = None,
    ):
        self.addr = addr
        #: The connection's fast path for the common answers (transport.py, "A server may take
        #: the common requests": the same contract; the producer's async answers, in C).
        self.fast = fast
        #: Called with every request before it is sent (ACL signing: Credentials.sign).
        self.rpc_hook = rpc_hook
        self.host, self.port = parse_addr(addr)
        self.handlers: dict[int, Handler] = dict(handlers or {})
        self.connect_timeout = connect_timeout
        self.limits = Limits(max_frame_size=max_frame_size, idle_timeout=idle_timeout, frame_timeout=frame_timeout)
        self.on_close = on_close
        self.name = name
        self._conn: Connection | None = None
        self._lock: asyncio.Lock | None = None
        self._sweeper: AsyncService | None = None
        self._closed = False

    @property
    def connection(self) -> Connection | None:
        """The current connection, if open."""
        c = self._conn
        return c if c is not None and not c.closed else None

    async def connect(self) -> Connection:
        """The open connection, opening it if needed (raises RemotingConnectError)."""
        conn = self.connection
        if conn is not None:
            return conn
        if self._closed:
            raise RemotingClosed(f"client of {self.addr} is closed")
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            conn = self.connection
            if conn is not None:
                return conn
            loop = asyncio.get_running_loop()
            try:
                _, conn = await asyncio.wait_for(
                    loop.create_connection(
                        lambda: ClientConnection(self.handlers, self.limits, on_close=self.on_close, name=self.name),
                        self.host,
                        self.port,
                    ),
                    self.connect_timeout,
                )
            except (OSError, asyncio.TimeoutError) as e:
                raise RemotingConnectError(f"cannot connect to {self.addr}: {e or 'timeout'}") from None
            sock = conn._transport.get_extra_info("socket") if conn._transport else None
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn.fast = self.fast
            read_native.attach(conn)  # its reads in C when fast is the client's C hook
            self._conn = conn
            if self._sweeper is None:
                self._sweeper = sweeper(lambda: [c for c in (self._conn,) if c is not None], 1.0,
                                        self.name or "client")
                self._sweeper.start()
            return conn

    async def invoke(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request and return the response (whatever its code)."""
        deadline = time.monotonic() + timeout
        conn = await self.connect()
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        return await conn.send_request(cmd, max(0.001, deadline - time.monotonic()))

    async def invoke_oneway(self, cmd: RemotingCommand) -> None:
        conn = await self.connect()
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        conn.send_oneway(cmd)

    async def close(self) -> None:
        self._closed = True
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()
            try:
                await asyncio.wait_for(conn.wait_closed(), 2.0)
            except asyncio.TimeoutError:
                conn.abort()
        if self._sweeper is not None:
            await self._sweeper.stop()
            self._sweeper = None

    async def __aenter__(self) -> "RemotingClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class SyncRemotingClient:
    """Blocking client: one request at a time (tests, CLI tools, a producer's sync sends).

    ``spin_us``: before it blocks for an answer, poll the socket for up to this long. On a VM
    whose idle vCPUs wake slowly, blocking costs the waiter a wake-up per answer (most of a
    loopback round trip: bench/RESULTS.md, session 4); spinning spends that time on the CPU
    instead. 0 (the default) never spins."""

    def __init__(self, addr: str, *, timeout: float = 3.0, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
                 rpc_hook: Callable[[RemotingCommand], Any] | None = None, spin_us: float = 0):
        self.addr = addr
        self.timeout = timeout
        # how long a wait for an answer polls before it blocks, in seconds (``spin_us``); an
        # attribute, not a property: native/sync_send.c's callers read it on every send
        self.spin_s = max(0.0, spin_us) / 1e6
        self.rpc_hook = rpc_hook
        host, port = parse_addr(addr)
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as e:
            raise RemotingConnectError(f"cannot connect to {addr}: {e}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        # what bounds a wait in blocking mode (block(), for a C caller); inert while a timeout is set
        tv = struct.pack("ll", int(timeout), int(timeout % 1 * 1e6))
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
        self.block_s = 0.0  # > 0: the socket is in blocking mode (block()), its waits bounded so
        self._decoder = FrameDecoder(max_frame_size)
        self._ready: list[RemotingCommand] = []
        self._opaque = 0
        # one receive buffer for the client's life: a recv(256 KiB) made a bytes object of that
        # size per read, which glibc maps and unmaps (mmap, mremap, munmap: three system calls)
        self._rbuf = memoryview(bytearray(256 * 1024))

    def _next_opaque(self) -> int:
        self._opaque = self._opaque % 0x7FFFFFFF + 1
        return self._opaque

    def block(self) -> float:
        """Put the socket in blocking mode for a C caller that sleeps in recv (native/sync_send.c:
        one system call per wait where a socket with a timeout polls first); its waits are then
        bounded by SO_RCVTIMEO / SO_SNDTIMEO, this client's timeout. Returns that timeout (0: no
        timeout to bound them, the socket left as it is). Every Python read or write of this
        client puts its timeout back first (``_unblock``)."""
        if self.timeout > 0:
            self.sock.settimeout(None)
            self.block_s = self.timeout
        return self.block_s

    def _unblock(self) -> None:
        self.block_s = 0.0
        self.sock.settimeout(self.timeout)

    def turn(self) -> int:
        """For a caller that writes its own request on this socket and reads its answer
        (client/sync_send.py): the request's opaque (``_next_opaque``'s step), or 0 with none
        drawn when something read is not yet taken (the socket's next bytes are not the next
        frame's). One call per sync send where an idle test, the decoder's ``pending`` property
        and ``_next_opaque`` were three (~700 instructions; RESULTS: session 10, syncc)."""
        if self._ready or self._decoder._buf:  # (FrameDecoder.pending without its property call)
            return 0
        self._opaque = o = self._opaque % 0x7FFFFFFF + 1
        return o

    def feed(self, data: bytes) -> None:
        """Bytes read from this client's socket by someone else: decoded as :meth:`receive` would."""
        self._ready.extend(decode_command(f) for f in self._decoder.feed(data))

    def send_raw(self, data: bytes) -> None:
        if self.block_s:
            self._unblock()
        self.sock.sendall(data)

    def send(self, cmd: RemotingCommand) -> None:
        if self.block_s:
            self._unblock()
        self.sock.sendall(encode_command(cmd))

    def receive(self, timeout: float | None = None) -> RemotingCommand:
        """The next command the server sends (response or request). Raises RemotingClosed at EOF."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while not self._ready:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RemotingTimeout(f"nothing from {self.addr} in time")
            self.block_s = 0.0  # (a timeout is set below: blocking mode ends)
            try:
                n = self._spin_recv() if self.spin_s else None
                if n is None:
                    self.sock.settimeout(left)
                    n = self.sock.recv_into(self._rbuf)
            except socket.timeout:
                raise RemotingTimeout(f"nothing from {self.addr} in time") from None
            except OSError as e:
                raise RemotingClosed(f"connection to {self.addr} failed: {e}") from None
            if not n:
                raise RemotingClosed(f"connection to {self.addr} closed by the server")
            self.feed(self._rbuf[:n])
        return self._ready.pop(0)

    def _spin_recv(self) -> int | None:
        """How many bytes the socket gave within ``spin_us`` (0 at EOF), or None: nothing came, block."""
        end = time.perf_counter() + self.spin_s
        self.sock.settimeout(0.0)  # a socket with a timeout would poll() before each recv
        recv, buf = self.sock.recv_into, self._rbuf
        while True:
            try:
                return recv(buf)
            except BlockingIOError:
                if time.perf_counter() > end:
                    return None

    def invoke(self, cmd, timeout: float | None = None) -> RemotingCommand:
        """Send a request and wait for its response; requests from the server are skipped.
        ``cmd`` is a RemotingCommand, or a request that makes its own frame (``frame(opaque)``
        and ``command()``: a producer's send, client.remote_send), written as its frame unless
        this client signs its requests."""
        if cmd.__class__ is not RemotingCommand:
            if self.rpc_hook is None:
                opaque = self._next_opaque()
                if self.block_s:
                    self._unblock()
                self.sock.sendall(cmd.frame(opaque))
                return self.response(opaque, timeout)
            cmd = cmd.command()
        cmd.opaque = self._next_opaque()
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        self.send(cmd)
        return self.response(cmd.opaque, timeout)

    def response(self, opaque: int, timeout: float | None) -> RemotingCommand:
        """The answer to the request numbered ``opaque``; whatever else comes first is dropped."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            resp = self.receive(max(0.0, deadline - time.monotonic()))
            if resp.flag & FLAG_RESPONSE and resp.opaque == opaque:
                return resp

    def invoke_oneway(self, cmd: RemotingCommand) -> None:
        cmd.opaque = self._next_opaque()
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        if self.rpc_hook is not None:
            self.rpc_hook(cmd)
        self.send(cmd)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "SyncRemotingClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
