"""A plain ``send_async`` / ``send_oneway`` frame written to the socket by the caller's own thread
when the connection is idle (``native/lane_direct.c`` says when and why), and what the client's
loop thread still does for it: the async send's timeout, and the flush of a partial write's rest.

Neither wakes the loop per message: the answer is read and completed on the loop as before
(``native/remote_answer.c``), and the timeouts are kept in one deque that a callback of the loop
sweeps (``DirectWrites.after`` arms it once; it re-arms itself while entries are left), instead of
a ``call_later`` per send, which from another thread would be a wake-up of the loop each. A send
times out at most ``SWEEP_S`` after its deadline.

``SHMQ_CALLER_WRITE=0`` turns it off (every frame through the loop thread, as before).

The loop thread's own writes of a client connection go out the same way, a non-blocking send()
with the GIL held (``_oneway.write_held``, given to ``protocol.transport.ClientConnection``):
through the transport's send() it let the GIL go at every write, an async producer's caller took
it, and the loop thread waited up to the switch interval (5 ms) to finish its turn and read the
answers. ``SHMQ_HELD_WRITE=0`` turns that off (the transport's own write).
"""
from __future__ import annotations

import collections
import os
import time

from shmq.native import _oneway
from shmq.protocol import RequestCode, transport

#: A put goes to the socket only when it and the put before it each came at least this long after
#: the put before them: at a higher rate the loop's batching (one write per burst) is cheaper
#: than a send() per frame (native/lane_direct.c, "Rate")
GAP_NS = 30_000
#: How often the loop looks at the timeouts of the sends written this way while any are open
SWEEP_S = 0.05


def enabled() -> bool:
    return os.environ.get("SHMQ_CALLER_WRITE", "1") != "0"


transport.use_held_write(None if os.environ.get("SHMQ_HELD_WRITE") == "0" else _oneway.write_held)


class DirectWrites:
    """The loop-side bookkeeping of the frames the callers wrote (one per ClientInstance)."""

    def __init__(self, loop):
        self.loop = loop
        self._open: collections.deque = collections.deque()  # (deadline, conn, opaque, timeout), in send order
        self._armed = False

    def after(self, conn, opaque, timeout, partial: bool) -> None:
        """From the caller's thread, right after its write: the async send ``opaque`` (None for a
        oneway) expires after ``timeout`` s; ``partial``: the frame's rest is first in
        ``conn._out`` and the loop must flush it."""
        if partial:
            self.loop.call_soon_threadsafe(conn._flush)
        if opaque is None:
            return
        self._open.append((time.monotonic() + timeout, conn, opaque, timeout))
        if not self._armed:  # (the sweep clears the flag before it looks at the deque: none is missed)
            self._armed = True
            self.loop.call_soon_threadsafe(self._sweep)

    def _sweep(self) -> None:
        """Drop the answered, expire the overdue (``Connection.expire``'s error), re-arm while any
        are open. An answered send leaves ``conn._pending`` when its answer is read."""
        now, q = time.monotonic(), self._open
        while q:
            deadline, conn, opaque, timeout = q[0]
            if opaque in conn._pending:
                if deadline > now:
                    break
                conn.expire((opaque,), RequestCode.SEND_MESSAGE_V2, timeout)
            q.popleft()
        self._armed = False
        if q:
            self._armed = True
            self.loop.call_later(min(SWEEP_S, max(0.0, q[0][0] - now)), self._sweep)

    def clear(self) -> None:
        self._open.clear()
