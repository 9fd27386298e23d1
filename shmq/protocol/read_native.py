"""A client connection's reads in C: the C reader (native/client_read.c, ``shmq.native._answer.Reader``)
registered with the loop for the socket in place of asyncio's transport reader.

Why: a read of a client connection ran asyncio's ``_SelectorSocketTransport._read_ready`` in
Python, which ``recv``s a new bytes object and calls :meth:`~shmq.protocol.read_path.ReadPath.data_received`
(Python), around the C fast hook and the flush; the C reader does the common read -- whole
frames the hook takes, from a frame boundary -- in one C call (bench/RESULTS.md, "Session 14,
readc14"). Everything else it hands to the Python path unchanged: read_path.py for the rest of a
read and for a read inside a frame, the transport for EOF and errors (native/client_read.c says
which). Writes stay the transport's.

How: the transport's own reading is paused for the connection's life (``pause_reading``: it
removes its reader) and the C reader is the loop's reader of the fd (``loop._add_reader``: the
public ``add_reader`` refuses an fd a transport owns). The connection's flow control
(``Connection._update_reading``) pauses and resumes the C reader instead (:func:`pause`,
:func:`resume`); the transport's ``close`` and ``abort`` remove whatever reads the fd, so the C
reader stops with them as the transport's own did.

The C core is the client's (this package does not import it): the client registers the reader
for its hook with :func:`use_reader`; a connection reads in C only when its ``fast`` is that
hook, on asyncio's selector loop and socket transport (a client's loop: protocol/loop.py).
``SHMQ_READ_C=0`` keeps every read on the transport (the benchmarks' before row).
"""
from __future__ import annotations

import asyncio
import os
from asyncio import selector_events
from collections.abc import Callable
from typing import Any

_hook: Any = None
_factory: Callable[..., Any] | None = None
_SOCKET_TRANSPORT = getattr(selector_events, "_SelectorSocketTransport", None)


def use_reader(hook: Any, factory: Callable[..., Any]) -> None:
    """Connections whose ``fast`` is ``hook`` read with ``factory(conn, transport, fd, size)``
    from now on (their :func:`attach`)."""
    global _hook, _factory
    _hook, _factory = hook, factory


def attach(conn: Any) -> bool:
    """Read ``conn`` (just connected, its ``fast`` set) with the C reader when it can; True if so."""
    t = conn._transport
    if (_factory is None or conn.fast is not _hook or conn.fast is None or os.environ.get("SHMQ_READ_C") == "0"
            or _SOCKET_TRANSPORT is None or type(t) is not _SOCKET_TRANSPORT or t.is_closing()
            or not isinstance(conn._loop, asyncio.SelectorEventLoop) or conn._reader is not None):
        return False
    fd = t._sock_fd
    reader = _factory(conn, t, fd, t.max_size)  # (transport.READ_SIZE: connection_made sets it)
    conn._reader = reader
    if not conn._read_paused:  # (paused by flow control: the transport's reading is off already, resume adds it)
        t.pause_reading()
        conn._loop._add_reader(fd, reader)
    return True


def pause(conn: Any) -> None:
    """Stop reading ``conn`` (flow control): the C reader off the loop."""
    conn._loop._remove_reader(conn._transport._sock_fd)


def resume(conn: Any) -> None:
    """Read ``conn`` again, unless its transport is closing (whose reading stays off, as the
    transport's ``resume_reading`` leaves it)."""
    t = conn._transport
    if not t.is_closing():
        conn._loop._add_reader(t._sock_fd, conn._reader)
