"""A sync send over TCP in one C call on the caller's thread (``native/sync_send.c``): the
frame from the queue's template, written on the thread's own blocking connection
(``protocol.client.SyncRemotingClient``), the answer waited for with the GIL released and read
into the SendResult, as ``Producer._invoke_sync`` + ``send_result`` do in Python.

Taken: a send with a queue template and no request signing, on a connection with nothing read
ahead; a plain message (what ``oneway.send_plain`` takes: its UNIQ_KEY drawn in C, properties
TAGS and UNIQ_KEY) or a batch body (properties ""). Any answer the C reader does not take (a
refusal, a transactionId, ...) comes back as the bytes read, which the connection's decoder
and the Python path then serve: same result, same errors. A timeout or a broken connection is
RemotingTimeout / RemotingClosed and the connection is dropped (``Producer._drop_sync``), so
the producer's retries go on as before.
"""
from __future__ import annotations

import time

from shmq.errors import RemotingClosed, RemotingError, RemotingTimeout
from shmq.native import _sync, ffi, lib

from .message import SendResult, SendStatus
from .oneway import lane_state, plain as oneway_plain
from .remote_send import send_result
from .uniq_id import generator

_UNIQ = generator()
_sync.bind(SendResult, SendStatus.SEND_OK, int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_uniq_ids"))),
           int(ffi.cast("uintptr_t", _UNIQ.c)))
EMONTH, UNSUPPORTED = _sync.EMONTH, _sync.UNSUPPORTED


def plain(p, msg) -> bool:
    """A message the C call builds whole: the lane's one rule of a plain message
    (``oneway.plain``), read from the producer's LaneState."""
    return oneway_plain(lane_state(p), msg)


def exchange(p, addr: str, mq, batch: bool, flag: int, tags, body: bytes, uniq, timeout: float):
    """One try of a sync send to ``addr``: its SendResult (or BrokerError), or None when this
    path does not take it (nothing sent). ``uniq`` None: a message's (drawn here), else a batch's
    ids."""
    inst = p.instance
    if inst.rpc_hook is not None:
        return None
    t = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, batch, False).template
    if t is None:
        return None
    c = p._sync_conn(addr)
    if not c.idle():
        return None
    deadline = time.monotonic() + timeout
    opaque = c.next_opaque()
    try:
        r = _sync.call(c.sock, t.pieces, 0, flag, tags, body, uniq, opaque, timeout, c.spin_s, mq)
        while r == EMONTH:
            _UNIQ.roll()
            r = _sync.call(c.sock, t.pieces, 0, flag, tags, body, uniq, opaque, timeout, c.spin_s, mq)
    except TimeoutError:
        p._drop_sync(addr, c)
        raise RemotingTimeout(f"nothing from {addr} in time") from None
    except OSError as e:
        p._drop_sync(addr, c)
        raise RemotingClosed(f"connection to {addr} failed: {e}") from None
    if r.__class__ is SendResult:
        return r
    if r.__class__ is int:  # UNSUPPORTED: tags the Python encoder escapes
        return None
    uniq, data = r
    try:
        c.feed(data)
        resp = c.response(opaque, max(0.0, deadline - time.monotonic()))
    except RemotingError:
        p._drop_sync(addr, c)
        raise
    return send_result(resp, mq, uniq)
