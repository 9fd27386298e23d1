"""One remoting connection on asyncio: frames in, handlers run, responses matched by opaque.

:class:`Connection` is the asyncio ``Protocol`` both :class:`~shmq.protocol.server.RemotingServer`
and :class:`~shmq.protocol.client.RemotingClient` use, so either end can serve requests and
send its own (a broker asks a client's connection for NOTIFY_CONSUMER_IDS_CHANGED the same
way a client asks the broker for a pull).

Why it is built the way it is:

* Requests of one connection are served concurrently. A handler that returns a coroutine
  runs as its own task, so a pull parked for 15 s does not hold up the heartbeat behind it
  (ali-ons and the Java client multiplex everything on one socket per broker). A handler
  that returns a command directly is answered inline, which saves a task for cheap requests
  such as route queries.
* Each side numbers its own requests; a response is matched by ``opaque`` and may arrive in
  any order. Responses that match nothing (timed out, or a request sent without waiting)
  are dropped.
* Memory is bounded per connection. The frame length is checked before buffering (see
  :mod:`frame`); reading pauses while more than ``max_inflight`` requests or
  ``max_inflight_bytes`` of request frames are being served, and while the peer does not
  read our answers (asyncio's write-buffer high-water mark). A peer can slow itself down,
  never the process.
* Anything undecodable closes the connection without an answer, as RocketMQ does; the
  frame boundary cannot be trusted after a bad length, and a header that does not parse
  has no opaque to answer to.
* A handler may answer later without a task: it takes ``conn.defer(cmd)`` and returns None;
  the :class:`Deferred` it got answers once (a SYNC_FLUSH send answered by the group commit
  that covers it: no coroutine, task or future per send). It counts as a request in flight
  until then, like a task.
* Writes are coalesced: the answers to the requests of one read, and everything written in
  one turn of the loop (a group commit's released sends), leave in one ``send()`` system
  call. On loopback each call also runs the peer's receive path and wakes its reader, which
  on a busy machine preempts this process (22-56 µs per call measured here), so 64 answers
  written one by one cost 64 wake-ups where one does. A lone answer still leaves at the end
  of the read that produced it: no added wait. Order on the wire is the order of ``send``.
* A server or client may take the common frames before they are decoded (``fast``):
  :mod:`shmq.protocol.read_path` says how, and holds the read path. A client connection whose
  ``fast`` is the C hook reads its socket in C (:mod:`shmq.protocol.read_native`).
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Union

from shmq.errors import (
    RemotingClosed,
    RemotingTimeout,
    ShmqError,
)
from shmq.protocol.codes import FLAG_ONEWAY, FLAG_RESPONSE, ResponseCode
from shmq.protocol.command import RemotingCommand, encode_command, encode_command_parts
from shmq.protocol import read_native
from shmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from shmq.protocol.read_path import ReadPath
from shmq.service import AsyncService

log = logging.getLogger("shmq.remoting")

#: ``async def handle(conn, cmd) -> RemotingCommand | None`` (a plain function works too).
Handler = Callable[["Connection", RemotingCommand], Union[Awaitable[RemotingCommand | None], RemotingCommand, None]]

#: ``fast(conn, data, pos) -> (pos, answers, stop)``: see "A server may take the common requests".
FastFrames = Callable[["Connection", bytes, int], tuple[int, Union[bytes, None], bool]]

#: Bodies at least this large are written without being copied into the frame (a sender that
#: builds whole frames itself leaves such a body to ``Connection.send``).
SCATTER_BODY = 64 * 1024


class Limits:
    """Per-connection bounds shared by server and client; all times in seconds."""

    __slots__ = ("max_frame_size", "max_inflight", "max_inflight_bytes", "frame_timeout", "idle_timeout")

    def __init__(
        self,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_inflight: int = 1024,
        max_inflight_bytes: int = 64 * 1024 * 1024,
        frame_timeout: float = 30.0,
        idle_timeout: float | None = 120.0,
    ):
        self.max_frame_size = max_frame_size
        self.max_inflight = max_inflight
        self.max_inflight_bytes = max_inflight_bytes
        self.frame_timeout = frame_timeout
        self.idle_timeout = idle_timeout


#: Most bytes one read of a connection takes (see ``connection_made``).
READ_SIZE = 64 * 1024


#: What ``Connection._pending`` is made of: a dict, or the C table the client's answer path reads
#: (``shmq.native._answer.Pending``, native/pending_table.h: the same dict protocol, no int object
#: or dict entry per request), which the client registers with :func:`use_pending_table` (this
#: package may not import the C core). One table a connection either way.
_pending_table: Callable[[], Any] = dict


def use_pending_table(factory: Callable[[], Any]) -> None:
    """Connections made from now on keep their requests in flight in ``factory()``."""
    global _pending_table
    _pending_table = factory


class Connection(ReadPath, asyncio.Protocol):
    """One TCP connection speaking remoting.

    Public attributes: ``peer`` and ``local`` (``"ip:port"``), ``context`` (a dict for the
    owner's per-connection state, e.g. the client id a heartbeat announced), ``closed``.
    """

    #: a function (transport, data) -> bytes sent, with the GIL held, from data's start: _flush's
    #: first send (``ClientConnection``'s, ``use_held_write``); None: the transport's own write
    held_write: Callable[[Any, bytes], int] | None = None

    def __init__(
        self,
        handlers: Mapping[int, Handler],
        limits: Limits,
        *,
        default_handler: Handler | None = None,
        on_close: Callable[["Connection"], Any] | None = None,
        name: str = "remoting",
    ):
        self._handlers = handlers
        self._default_handler = default_handler
        self.fast: FastFrames | None = None  # a server's fast path (set by RemotingServer)
        self._on_close = on_close
        self.limits = limits
        self.name = name
        self._decoder = FrameDecoder(limits.max_frame_size)
        self._transport: asyncio.Transport | None = None
        self._loop = loop = asyncio.get_running_loop()
        # the loop's clock, as a C call where it is time.monotonic (asyncio's loop.time() is a Python
        # method around it): read per read and per frame written
        self._now = time.monotonic if type(loop).time is asyncio.BaseEventLoop.time else loop.time
        # the requests in flight by opaque: every reader (answers, connection_lost, timers, busy)
        # looks here; a client's is the C table (use_pending_table), a dict otherwise
        self._pending: Any = _pending_table()
        self._next_opaque = 0
        self._tasks: dict[asyncio.Task[Any], int] = {}
        self._deferred = 0  # Deferred answers not given yet (see "answer later")
        self._inflight_bytes = 0
        self._write_paused = False
        self._read_paused = False
        self._reader: Any = None  # the C reader when it reads this connection (read_native.py)
        # frames written but not yet handed to the transport (see "Writes are coalesced")
        self._out: list[bytes] = []
        self._in_read = False
        self._flush_scheduled = False
        self._writing = False  # a write of _out under way (_flush)
        self._closed_fut: asyncio.Future[None] = self._loop.create_future()
        self.closed = False
        self.peer = "?"
        self.local = "?"
        self.context: dict[str, Any] = {}
        self.last_activity = self._now()
        self.partial_since: float | None = None  # (read_path.py: None exactly when no bytes are held back)
        self.created = time.time()

    def __repr__(self) -> str:
        return f"<Connection {self.name} {self.local}<->{self.peer}{' closed' if self.closed else ''}>"

    # ---- asyncio.Protocol -------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = transport  # type: ignore[assignment]
        self.peer = _fmt_addr(transport.get_extra_info("peername"))
        self.local = _fmt_addr(transport.get_extra_info("sockname"))
        # asyncio reads with sock.recv(256 KiB), which glibc serves with mmap (every small read cost
        # mmap + mremap + munmap and a page fault); below 128 KiB it comes from the heap
        try:
            transport.max_size = READ_SIZE  # type: ignore[attr-defined]
        except AttributeError:  # uvloop: its own read buffer (protocol/loop.py keeps the copies in the heap)
            pass

    def connection_lost(self, exc: Exception | None) -> None:
        if self.closed:
            return
        self.closed = True
        self._out.clear()
        err = RemotingClosed(f"connection to {self.peer} closed" + (f": {exc}" if exc else ""))
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(err)
        self._pending.clear()
        for task in list(self._tasks):
            task.cancel()
        if not self._closed_fut.done():
            self._closed_fut.set_result(None)
        if self._on_close is not None:
            try:
                self._on_close(self)
            except Exception:
                log.exception("%s: on_close hook failed", self)

    def pause_writing(self) -> None:
        self._write_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        self._update_reading()

    # ---- serving requests ------------------------------------------------------------------
    def _dispatch(self, cmd: RemotingCommand, size: int) -> None:
        handler = self._handlers.get(cmd.code, self._default_handler)
        if handler is None:
            if not cmd.flag & FLAG_ONEWAY:
                self.send(
                    cmd.make_response(
                        ResponseCode.REQUEST_CODE_NOT_SUPPORTED, f" request type {cmd.code} not supported"
                    )
                )
            return
        try:
            result = handler(self, cmd)
        except Exception as e:  # noqa: BLE001 - every failure becomes an answer
            self._answer(cmd, self._error_response(cmd, e))
            return
        if result is None or result.__class__ is RemotingCommand:  # the common answers, checked first
            self._answer(cmd, result)
        elif inspect.isawaitable(result):
            task = self._loop.create_task(self._run(cmd, result))
            self._tasks[task] = size
            self._inflight_bytes += size
            task.add_done_callback(self._task_done)
            self._update_reading()
        else:
            self._answer(cmd, result)

    async def _run(self, cmd: RemotingCommand, aw: Awaitable[RemotingCommand | None]) -> None:
        try:
            result = await aw
        except asyncio.CancelledError:
            raise
        except Exception as e:  # noqa: BLE001
            result = self._error_response(cmd, e)
        self._answer(cmd, result)

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._inflight_bytes -= self._tasks.pop(task, 0)
        if not task.cancelled() and task.exception() is not None:  # pragma: no cover - _run catches
            log.error("%s: handler task failed", self, exc_info=task.exception())
        self._update_reading()

    def _error_response(self, cmd: RemotingCommand, e: Exception) -> RemotingCommand:
        if isinstance(e, ShmqError):
            log.info("%s: request code %d failed: %s", self, cmd.code, e)
            return cmd.make_response(e.code, e.remark or str(e))
        log.exception("%s: handler for request code %d raised", self, cmd.code)
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"{type(e).__name__}: {e}")

    def _answer(self, req: RemotingCommand, resp: RemotingCommand | None) -> None:
        if resp is None or req.flag & FLAG_ONEWAY or self.closed:
            return
        # The response belongs to this request whatever the handler filled in.
        resp.opaque = req.opaque
        resp.flag |= FLAG_RESPONSE
        resp.serialize_type = req.serialize_type
        self.send(resp)

    def defer(self, req: RemotingCommand) -> "Deferred":
        """For a handler that answers ``req`` later, outside any task: it returns None now and
        calls the result's ``answer`` once (from the event loop's thread)."""
        self._deferred += 1
        if self._deferred + len(self._tasks) >= self.limits.max_inflight:
            self._update_reading()
        return Deferred(self, req)

    def _deferred_answer(self, req: RemotingCommand, resp: RemotingCommand | None) -> None:
        self._deferred -= 1
        self._answer(req, resp)
        if self._read_paused:
            self._update_reading()

    def _update_reading(self) -> None:
        t = self._transport
        if t is None or self.closed:
            return
        busy = (
            self._write_paused
            or len(self._tasks) + self._deferred >= self.limits.max_inflight
            or self._inflight_bytes > self.limits.max_inflight_bytes
        )
        if busy and not self._read_paused:
            self._read_paused = True
            t.pause_reading() if self._reader is None else read_native.pause(self)
        elif not busy and self._read_paused:
            self._read_paused = False
            t.resume_reading() if self._reader is None else read_native.resume(self)

    def _protocol_error(self, e: Exception) -> None:
        log.warning("%s: closing: %s", self, e)
        self.close()

    # ---- sending ---------------------------------------------------------------------------
    def send(self, cmd: RemotingCommand) -> None:
        """Write one command as is (a response, or a request whose answer nobody awaits)."""
        t = self._transport
        if t is None or self.closed or t.is_closing():
            return
        if len(cmd.body) >= SCATTER_BODY:
            self._flush()  # what was written before goes first
            self._writing = True  # (_flush says why)
            try:
                t.writelines(encode_command_parts(cmd))
            finally:
                self._writing = False
            self.last_activity = self._now()
        else:
            self.write_frame(encode_command(cmd))

    def write_frame(self, frame: bytes) -> None:
        """Write one encoded frame, coalesced with the others of this read or loop turn."""
        t = self._transport
        if t is None or self.closed or t.is_closing():
            return
        self._out.append(frame)
        if not self._in_read and not self._flush_scheduled:
            # the rest of this turn of the loop may write more; the flush runs after it
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        self.last_activity = self._now()

    @property
    def writing_paused(self) -> bool:
        """The peer does not read what we write (the transport's buffer is over its high-water mark)."""
        return self._write_paused

    def defer_flush(self) -> bool:
        """Until :meth:`flush`, what is sent is coalesced as during a read, with no flush
        callback: for a callback that answers several requests of several connections at once
        (held pulls, broker/worker/pull_hold.py), so the answers leave in one write per
        connection in this turn of the loop, not in a callback of the next. False (and nothing
        to flush after) when this connection is in a read already: its read flushes them."""
        if self._in_read:
            return False
        self._in_read = True
        return True

    def flush(self) -> None:
        """Write what :meth:`defer_flush` held back, now."""
        self._in_read = False
        self._flush()

    def flush_now(self) -> None:
        """Write what was coalesced so far, in the middle of a read: for a fast path whose answers
        must leave before its next work (send_fast.py: its sends then answer held pulls)."""
        self._flush()

    def _flush(self) -> None:
        """Hand the coalesced frames to the transport: one write, one system call."""
        self._flush_scheduled = False
        out = self._out
        if not out:
            return
        t = self._transport
        if t is None or self.closed or t.is_closing():
            out.clear()
            return
        # from before _out empties till the transport has it (its send() lets go of the GIL): a
        # caller thread writes a frame itself only when neither holds anything (lane_direct.c)
        self._writing = True
        try:
            data = out[0] if len(out) == 1 else b"".join(out)
            out.clear()
            held = self.held_write
            if held is None:  # a server's connection: the transport's write, as always
                t.write(data)
            else:
                # a client's: the first send() as the transport's own write makes it, with the GIL
                # held (lane_direct.c write_held says why); the rest, or all of it, the transport's
                n = held(t, data)
                if n < len(data):
                    t.write(memoryview(data)[n:] if n else data)
        finally:
            self._writing = False

    def _new_opaque(self) -> int:  # Java's int that wraps; positive, so every peer is happy
        self._next_opaque = self._next_opaque % 0x7FFFFFFF + 1
        return self._next_opaque

    async def send_request(self, cmd: RemotingCommand, timeout: float = 3.0) -> RemotingCommand:
        """Send a request over this connection and wait for its response (not interpreted: check
        ``response.code``). Sets ``cmd.opaque``. Raises :class:`~shmq.errors.RemotingTimeout` after
        ``timeout`` seconds, :class:`~shmq.errors.RemotingClosed` if the connection goes away first."""
        fut: asyncio.Future[RemotingCommand] = self._loop.create_future()
        opaque = self.start_request(cmd, fut)
        timer = self._loop.call_later(timeout, self._expire, opaque, cmd.code, timeout)
        try:
            return await fut
        finally:
            timer.cancel()
            self._pending.pop(opaque, None)

    def start_request(self, cmd: RemotingCommand, waiter) -> int:
        """Send a request whose response goes to ``waiter.set_result(response)`` on this loop, or
        ``waiter.set_exception(RemotingClosed)`` if the connection goes away first. ``waiter`` has
        ``done()``, ``set_result`` and ``set_exception``: an asyncio Future (:meth:`send_request`)
        or a lighter object that needs no task (the producer's async send). The caller arranges
        the timeout (:meth:`expire`). Sets ``cmd.opaque`` and returns it."""
        if self.closed or self._transport is None:
            raise self._closed_error()
        cmd.opaque = opaque = self._new_opaque()
        cmd.flag &= ~(FLAG_RESPONSE | FLAG_ONEWAY)
        self._pending[opaque] = waiter
        self.send(cmd)
        return opaque

    def _closed_error(self) -> RemotingClosed:
        """What a request on this closed connection raises (the C ``start_frame`` too)."""
        return RemotingClosed(f"connection to {self.peer} is closed")

    def start_frame(self, build: Callable[[int], bytes], waiter) -> int:
        """:meth:`start_request` for a request that makes its own frame: ``build(opaque)`` returns
        the encoded request (a producer's send, client.remote_send). Returns the opaque. A
        client's connections run the C core's, the same steps (:func:`use_start_frame`)."""
        if self.closed or self._transport is None:
            raise self._closed_error()
        self._next_opaque = opaque = self._next_opaque % 0x7FFFFFFF + 1  # _new_opaque's numbering
        self._out.append(build(opaque))  # write_frame's steps, inline (once per pull of a consumer)
        self._pending[opaque] = waiter
        if not self._in_read and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        self.last_activity = self._now()
        return opaque

    def start_frames(self, jobs) -> list | None:
        """:meth:`start_frame` of a run of requests, written together: ``jobs`` are tuples whose
        items 1 and 2 are the request (``frame(opaque)``) and its waiter. Per job the opaque, or
        the exception its frame raised (not sent); None when closed (none is sent)."""
        if self.closed or self._transport is None:
            return None
        opaque, out, pending, started = self._next_opaque, self._out, self._pending, []
        for job in jobs:
            opaque = opaque % 0x7FFFFFFF + 1  # _new_opaque's numbering
            try:
                out.append(job[1].frame(opaque))
            except Exception as e:  # noqa: BLE001 - its own waiter hears
                started.append(e)
                continue
            pending[opaque] = job[2]
            started.append(opaque)
        self._next_opaque = opaque
        if not self._in_read and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        self.last_activity = self._now()
        return started

    def start_lane(self, data: bytes, waiters) -> bool:
        """Framed requests (client/async_lane.py): ``waiters`` by opaque (a Run, moved into the
        table in C), then ``data``; False when closed."""
        if self.closed or self._transport is None:
            return False
        self._pending.update(waiters)
        self.write_frame(data)
        return True

    def send_frames(self, builds) -> None:
        """:meth:`send_oneway` of requests whose ``build(opaque)`` makes the frame, written together."""
        if self.closed:
            raise self._closed_error()
        t = self._transport
        if t is None or t.is_closing():
            return
        opaque = self._next_opaque
        out = self._out
        for build in builds:
            opaque = opaque % 0x7FFFFFFF + 1  # _new_opaque's numbering
            out.append(build(opaque))
        self._next_opaque = opaque
        if not self._in_read and not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self._flush)
        self.last_activity = self._now()

    def expire(self, opaques: list[int], code: int, timeout: float) -> None:
        """Fail with RemotingTimeout the requests of ``opaques`` still unanswered (one timer for
        many :meth:`start_request` calls made together)."""
        for opaque in opaques:
            self._expire(opaque, code, timeout)

    def _expire(self, opaque: int, code: int, timeout: float) -> None:
        fut = self._pending.pop(opaque, None)
        if fut is not None and not fut.done():
            fut.set_exception(RemotingTimeout(f"no answer from {self.peer} to request code {code} within {timeout:g}s"))

    def send_oneway(self, cmd: RemotingCommand) -> None:
        """Send a request with the oneway bit: the peer answers nothing."""
        if self.closed:
            raise self._closed_error()
        cmd.opaque = self._new_opaque()
        cmd.flag = (cmd.flag | FLAG_ONEWAY) & ~FLAG_RESPONSE
        self.send(cmd)

    # ---- life --------------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Requests are being served or awaited: an idle timeout must not close it now."""
        return bool(self._tasks or self._pending or self._deferred)

    def close(self) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._flush()  # written before the close: still sent (the transport drains it)
            self._transport.close()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()

    async def wait_closed(self) -> None:
        await asyncio.shield(self._closed_fut)

    def check_timeouts(self, now: float) -> str | None:
        """Why this connection should be closed at loop time ``now``, or ``None``."""
        if self.partial_since is not None and now - self.partial_since > self.limits.frame_timeout:
            return f"partial frame ({self._decoder.pending} bytes) not completed within {self.limits.frame_timeout:g}s"
        idle = self.limits.idle_timeout
        if idle is not None and not self.busy and now - self.last_activity > idle:
            return f"idle for {idle:g}s"
        return None


class Deferred:
    """One request's answer, given later by ``answer`` (see :meth:`Connection.defer`)."""

    __slots__ = ("conn", "req")

    def __init__(self, conn: Connection, req: RemotingCommand):
        self.conn = conn
        self.req = req

    def answer(self, resp: RemotingCommand | None) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:  # once: a second answer is a bug, and is dropped
            conn._deferred_answer(self.req, resp)


def _fmt_addr(addr: Any) -> str:
    if not addr:
        return "?"
    if isinstance(addr, tuple):
        host, port = addr[0], addr[1]
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return str(addr)


def sweeper(connections: Callable[[], list[Connection]], period: float, name: str) -> AsyncService:
    """A service (not started) that closes connections whose partial frame or idleness timed
    out, every ``period`` seconds."""
    def sweep_once() -> None:
        now = asyncio.get_running_loop().time()
        for conn in connections():
            why = conn.check_timeouts(now)
            if why is not None:
                log.info("%s: closing: %s", conn, why)
                conn.abort() if conn.partial_since is not None else conn.close()

    return AsyncService(f"{name}-sweep", period, sweep_once, log=log)


class ClientConnection(Connection):
    """A client's connection (``protocol.client.RemotingClient``): what its loop thread writes
    leaves in a send() made with the GIL held (``held_write``, set by the client layer:
    ``client/direct_write.py``, ``native/lane_direct.c`` ``write_held``). An async producer's
    caller thread wants the GIL all the time, and CPython hands it back to a thread that let it
    go only when the holder blocks or after the switch interval (5 ms): through the transport's
    send() the loop thread lost it at every write and waited to finish its turn and read the
    answers (bench/RESULTS.md, "Session 16, asyncgil16")."""


def use_held_write(fn: Callable[[Any, bytes], int] | None) -> None:
    """Client connections' first send of a flush through ``fn`` (None: the transport's write)."""
    ClientConnection.held_write = None if fn is None else staticmethod(fn)


def use_start_frame(method: Any) -> None:
    """Client connections' :meth:`Connection.start_frame` is ``method`` (the C core's, a method
    of the class: native/conn_queue.c, which pull_steady.c calls directly)."""
    ClientConnection.start_frame = method
