"""How the client's loop thread hands the requests its callers submitted to a connection
(``ClientInstance._drain_submitted`` and ``_connect_and_start`` call these): one request, a run
of common async sends, a run of oneway frames, a lane segment with async sends in it; every
failure reaches its own waiter, and every request started gets a timer (one per connection,
code and timeout)."""
from __future__ import annotations

import logging

from shmq.errors import RemotingClosed
from shmq.native._answer import Run
from shmq.protocol import RemotingCommand, RequestCode
from shmq.protocol.transport import SCATTER_BODY as _FRAME_BODY_MAX  # larger: sent as a RemotingCommand

log = logging.getLogger("shmq.client")


def failed(waiter, e: Exception) -> None:
    """A submitted request that could not be sent: its waiter hears; a oneway one (no waiter) is
    dropped, as a oneway send's caller asked not to hear about it. A Run: a lane segment's async
    sends by opaque, each hears."""
    if waiter.__class__ is Run:
        for w in waiter.values():
            w.set_exception(e)
    elif waiter is not None:
        waiter.set_exception(e)
    else:
        log.debug("oneway send failed: %s", e)


def start(client, conn, req, waiter) -> int | None:
    """Hand one submitted request to ``conn``: its frame, or the command (signed first, when
    the client signs, or with a large body the transport writes uncopied). The opaque to
    expire, or None for oneway."""
    if req.__class__ is bytes:  # oneway frames from the lane
        conn.write_frame(req)
        return None
    if req.__class__ is not RemotingCommand and (client.rpc_hook is not None or len(req.body) >= _FRAME_BODY_MAX):
        req = req.command()
    if req.__class__ is RemotingCommand:
        if client.rpc_hook is not None:
            client.rpc_hook(req)
        if waiter is None:
            conn.send_oneway(req)
            return None
        return conn.start_request(req, waiter)
    if waiter is None:
        conn.send_frames((req.frame,))
        return None
    return conn.start_frame(req.frame, waiter)


def send_oneways(conn, builds: list) -> None:
    try:
        conn.send_frames(builds)
    except Exception as e:  # noqa: BLE001 - oneway: the caller asked not to hear
        log.debug("oneway sends failed: %s", e)
    builds.clear()


def start_asyncs(conn, jobs: list, timers: dict) -> None:
    """Start a run of common async sends to ``conn`` (``Connection.start_frames``: one call, not
    four per send); each failure reaches its own waiter."""
    started = conn.start_frames(jobs)
    if started is None:  # the connection is closed: each hears it
        for job in jobs:
            failed(job[2], RemotingClosed(f"connection to {conn.peer} is closed"))
    else:
        for job, opaque in zip(jobs, started):
            if opaque.__class__ is int:
                timers.setdefault((conn, job[1].code, job[3]), []).append(opaque)
            else:
                failed(job[2], opaque)
    jobs.clear()


def start_lane(conn, data: bytes, waiters: Run, timeout: float, timers: dict) -> None:
    """A lane segment with async sends in it (client/async_lane.py): their waiters registered
    with ``conn`` before its frames are written, one timer for them (the Run stands for its
    opaques in the timer's list: no int object a send)."""
    if conn.start_lane(data, waiters):
        timers.setdefault((conn, RequestCode.SEND_MESSAGE_V2, timeout), []).append(waiters)
    else:
        failed(waiters, RemotingClosed(f"connection to {conn.peer} is closed"))


def start_one(client, conn, cmd, waiter, timeout: float, timers: dict) -> None:
    if cmd.__class__ is bytes and waiter is not None:
        start_lane(conn, cmd, waiter, timeout, timers)
        return
    try:
        opaque = start(client, conn, cmd, waiter)
    except Exception as e:  # noqa: BLE001 - the waiter hears of every failure
        failed(waiter, e)
        return
    if opaque is not None:
        timers.setdefault((conn, cmd.code, timeout), []).append(opaque)


def start_timers(loop, timers: dict) -> None:
    """One timer per connection, code and timeout for the requests started together."""
    for (conn, code, timeout), opaques in timers.items():
        loop.call_later(timeout, expire, conn, opaques, code, timeout)


def expire(conn, opaques: list, code: int, timeout: float) -> None:
    """``conn.expire`` of the requests of ``opaques`` (ints and lane Runs) still unanswered, in
    their order. By the timer nearly all are answered: they are found by one C loop over the
    table (``Pending.left``), not a Python call each."""
    left = conn._pending.left(opaques)
    if left:
        conn.expire(left, code, timeout)
