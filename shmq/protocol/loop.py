"""The event loop of each shmq process: uvloop for the servers, asyncio for the client.

Which process runs which loop, and why (instruction counts, bench/RESULTS.md "Session 7, uvl"):

* NameServer, broker supervisor, broker workers, ``shmq up``: uvloop, through :func:`run`. A
  worker's turn of the loop is most of what a lone request costs once the request itself is C:
  uvloop's turn cost a sync send 33k instructions in the worker against asyncio's 59k, a
  one-message pull cycle 184k against 240k, a NameServer route query 56k against 81k. Where
  many requests share one read (the Java benchmark's 64 sender threads, pipelined async
  sends) the turn is shared too and the two loops cost the same.
* The client (``ClientInstance``): always the standard selector loop, ``client/handoff.py``'s
  ``ClientLoop`` (with a leaner turn of its own): its selector is what wakes the consume threads
  after it lets go of the GIL, and uvloop has no selector to put that in; the caller-thread write
  of a lane frame (native/lane_direct.c) also reads the selector transport's buffer and socket.
  Measured (bench/RESULTS.md, "Session 10, tcpread"): uvloop, with the consume thread woken at
  once instead, would count ~17k instructions fewer per one-message pull cycle than ClientLoop's
  own turn; not taken for those two reasons.

``SHMQ_UVLOOP=0`` forces the standard loop in the servers, e.g. to compare the two or to debug.
uvloop is a dependency; a platform without it gets the standard loop.

uvloop reads a socket into its own 256,000-byte buffer and hands the protocol a copy of what
arrived (``Connection.connection_made``'s ``max_size`` is asyncio's knob, not uvloop's). On a
pipelined stream those copies are ~100 KiB, which glibc served from the top of the heap and
gave back at every free (its trim threshold is 128 KiB): each read paid brk twice and the
kernel's work of mapping the pages again (a worker under oneway sends: 273 brk per 117 reads, a
third of its CPU in the kernel). ``_keep_read_buffers`` raises the two thresholds so the next
read's copy reuses that memory.
"""
from __future__ import annotations

import asyncio
import ctypes
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def uvloop_enabled() -> bool:
    if os.environ.get("SHMQ_UVLOOP", "1") == "0":
        return False
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A server process's loop (see the module docstring)."""
    if uvloop_enabled():
        import uvloop

        _keep_read_buffers()
        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


#: glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3


def _keep_read_buffers() -> None:
    """Serve allocations of up to 1 MiB (a read's copy: up to 256,000 bytes) from the heap, and
    keep up to 4 MiB free at its top, so a read's buffer is the last read's memory again (see the
    module docstring). Nothing to do without glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_MMAP_THRESHOLD, 1 << 20)
    mallopt(_M_TRIM_THRESHOLD, 4 << 20)


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on a server process's loop."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


def loop_name() -> str:
    """The loop :func:`new_event_loop` makes: "uvloop" or "asyncio"."""
    return "uvloop" if uvloop_enabled() else "asyncio"
