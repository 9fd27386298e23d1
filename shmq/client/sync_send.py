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

from shmq.errors import BrokerError, RemotingClosed, RemotingError, RemotingTimeout
from shmq.native import _sync, ffi, lib

from .async_lane import _targets
from .message import SendResult, SendStatus
from .oneway import lane_state, plain as oneway_plain
from .remote_send import send_result
from .uniq_id import generator

_UNIQ = generator()
_sync.bind(SendResult, SendStatus.SEND_OK, int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_uniq_ids"))),
           int(ffi.cast("uintptr_t", _UNIQ.c)))
EMONTH, UNSUPPORTED = _sync.EMONTH, _sync.UNSUPPORTED
_NONE: dict = {}


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
    return _exchange(p, addr, c, t, mq, flag, tags, body, uniq, time.monotonic() + timeout, timeout)


def _exchange(p, addr: str, c, t, mq, flag: int, tags, body: bytes, uniq, deadline: float, timeout: float):
    """``exchange`` on the idle sync connection ``c`` with the queue's template ``t``."""
    opaque = c.next_opaque()
    block = c.block_s or c.block()  # (its recv sleeps for the answer: no poll first)
    try:
        r = _sync.call(c.sock, t.pieces, 0, flag, tags, body, uniq, opaque, timeout, c.spin_s, mq, block)
        while r == EMONTH:
            _UNIQ.roll()
            r = _sync.call(c.sock, t.pieces, 0, flag, tags, body, uniq, opaque, timeout, c.spin_s, mq, block)
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


def send_plain(p, msg):
    """``Producer._hot`` of a producer that never sends locally: ``p.send(msg)`` of a plain
    message (the lane's rule, ``oneway.plain``) over TCP with its first try made here, the
    queue's route and template read from the LaneState's cache (``async_lane._targets``, the
    targets ``send_async``'s lane sends with) and the thread's open sync connection. Returns
    None with nothing sent (nor the round robin drawn from) when the message, the route or the
    connection is not ready so, and ``Producer._send`` decides it from the start; a try that
    fails goes on in ``Producer._tries``, as if ``_send`` had made it: the same queue drawn,
    the same retries.

    Why: ``_send``'s general steps (``plain``, ``_publish_info``, ``_select``, ``_send_one``,
    ``master_addr``, ``exchange``, ``_frames.get``, ``_sync_conn``) were ~10 Python calls per
    send around the one C call: CPU on the round trip a sync send waits for."""
    s = p._lane_state
    if s is None:
        s = lane_state(p)
    if s.fault or s.links is not None or not oneway_plain(s, msg):
        return None
    topic = msg.topic
    r = s.routes.get(topic)
    if r is None or r[0] is not s.inst.publish.get(topic):
        r = _targets(p, s, topic)
        if r is None:
            return None
    info, targets = r
    deadline = time.monotonic() + s.timeout
    mq, target = targets[next(s.rr) % len(targets)]
    addr = s.inst.broker_addrs.get(mq.broker_name, _NONE).get(0)
    conns = getattr(p._tls, "conns", None)
    c = conns.get(addr) if conns is not None and addr is not None else None
    failed = None
    if c is not None and c.idle():
        try:
            r = _exchange(p, addr, c, target.template, mq, msg.flag, msg.tags or None, msg.body, None, deadline,
                          s.timeout)
            if r is not None:
                return r
        except (RemotingError, BrokerError) as e:
            failed = e
    # a failed try, or none made (no connection yet, a read-ahead, no address, tags only the
    # Python encoder escapes): the general way from this queue on
    return p._tries(msg, None, info, deadline, None, mq, failed)
