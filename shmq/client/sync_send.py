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
from shmq.message.names import RETRY_PREFIX
from shmq.native import _sync, ffi, hot_encode_batch, lib
from shmq.protocol.send_answer import answer_pieces

from .async_lane import pick
from .local_send import _tags_head
from .message import Message, SendResult, SendStatus
from .oneway import lane_state, plain as oneway_plain
from .remote_send import send_result
from .uniq_id import generator

_UNIQ = generator()
_UNIQ_ADDR = int(ffi.cast("uintptr_t", _UNIQ.c))  # the process's shmq_uniq, for hot_encode_batch
_sync.bind(SendResult, SendStatus.SEND_OK, int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_uniq_ids"))),
           int(ffi.cast("uintptr_t", _UNIQ.c)))
_sync.bind_template(answer_pieces())  # this broker's SUCCESS answers are matched, not scanned
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
    return _exchange(p, addr, c, t, mq, flag, tags, body, uniq, time.monotonic() + timeout, timeout)


def _exchange(p, addr: str, c, t, mq, flag: int, tags, body: bytes, uniq, deadline: float, timeout: float):
    """``exchange`` on the sync connection ``c`` with the queue's template ``t``; None, nothing
    sent, when ``c`` has read bytes not yet taken (its next bytes are not the answer's)."""
    opaque = c.turn()
    if not opaque:
        return None
    block = c.block_s or c.block()  # (its recv sleeps for the answer: no poll first)
    try:
        r = _sync.call(c.sock, t.pieces, 0, flag, tags, body, uniq, opaque, timeout, c.spin_s, mq, block)
        while r == EMONTH:
            _UNIQ.roll()
            r = _sync.call(c.sock, t.pieces, 0, flag, tags, body, uniq, opaque, timeout, c.spin_s, mq, block)
    except OSError as e:
        raise _broken(p, addr, c, e) from None
    return _settle(p, addr, c, mq, opaque, r, deadline)


def _broken(p, addr: str, c, e: OSError) -> RemotingError:
    """A try's call raised ``e`` (TimeoutError, or another OSError): the connection dropped, and
    the RemotingError the producer's retries take."""
    p._drop_sync(addr, c)
    if isinstance(e, TimeoutError):
        return RemotingTimeout(f"nothing from {addr} in time")
    return RemotingClosed(f"connection to {addr} failed: {e}")


def _settle(p, addr: str, c, mq, opaque: int, r, deadline: float):
    """What ``_sync.call`` answered, as a SendResult (or BrokerError); None when it sent nothing
    (an int: UNSUPPORTED, tags the Python encoder escapes). Bytes the C reader did not take go to
    the connection's decoder and the Python answer path."""
    if r.__class__ is SendResult:
        return r
    if r.__class__ is int:
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
    queue's route and template read from the LaneState's cache (``async_lane.pick``, the
    targets ``send_async``'s lane sends with) and the thread's open sync connection. The rule,
    the cache and the round robin are one C call, ``s.plan.sync`` (native/async_plain.c, the
    same code as ``send_async``'s C step), and ``_plain_route`` only for what it does not take. Returns
    None with nothing sent (nor the round robin drawn from) when the message, the route or the
    connection is not ready so, and ``Producer._send`` decides it from the start; a try that
    fails goes on in ``Producer._tries``, as if ``_send`` had made it: the same queue drawn,
    the same retries.

    Why: ``_send``'s general steps (``plain``, ``_publish_info``, ``_select``, ``_send_one``,
    ``master_addr``, ``exchange``, ``_frames.get``, ``_sync_conn``) were ~10 Python calls per
    send around the one C call: CPU on the round trip a sync send waits for; ``oneway.plain``
    and the cache's look-ups in Python were ~3,000 instructions more than ``plan.sync``."""
    s = p._lane_state
    if s is None:
        s = lane_state(p)
    plan = s.plan  # (made only without local links or fault selection, as this path requires)
    r = plan.sync(msg) if plan is not None else None
    if r is None:
        r = _plain_route(p, s, msg)
        if r is None:
            return None
    info, mq, addr, t, flag, tags, body = r
    timeout = s.timeout
    deadline = time.monotonic() + timeout
    conns = getattr(p._tls, "conns", None)
    c = conns.get(addr) if conns is not None and addr is not None else None
    failed = None
    if c is not None:
        try:
            r = _exchange(p, addr, c, t, mq, flag, tags, body, None, deadline, timeout)
            if r is not None:
                return r
        except (RemotingError, BrokerError) as e:
            failed = e
    # a failed try, or none made (no connection yet, a read-ahead, no address, tags only the
    # Python encoder escapes): the general way from this queue on
    return p._tries(msg, None, info, deadline, None, mq, failed)


def _plain_route(p, s, msg):
    """What ``s.plan.sync(msg)`` answers (native/async_plain.c: the plain rule, the route's cache,
    the round robin drawn), in Python, for a message it did not take (a route not yet cached, a
    type only Python's test decides) or a producer with no plan: None (nothing drawn) when not
    plain or no route."""
    if s.fault or s.links is not None or not oneway_plain(s, msg):
        return None
    picked = pick(p, s, msg.topic)
    if picked is None:
        return None
    info, mq, target = picked
    return (info, mq, s.inst.broker_addrs.get(mq.broker_name, _NONE).get(0), target.template, msg.flag,
            msg.tags or None, msg.body)


def encode_plain_batch(msgs: list, head: bytes, limit: int):
    """A uniform batch's SEND_BATCH_MESSAGE body and the 32*n bytes of its UNIQ_KEYs, checked and
    encoded in one C call (``hot_encode_batch``: every item exactly a Message of the first one's
    topic and tags ``head``, a body of 1..limit bytes, no keys, properties, delay or flag; the
    same encoder as the local batch's); an int SHMQ_* status or None when it does not take them
    (nothing drawn but ids: the caller's general path checks and raises)."""
    r = hot_encode_batch(_UNIQ_ADDR, msgs, head, limit)
    while r == lib.SHMQ_EMONTH:
        _UNIQ.roll()
        r = hot_encode_batch(_UNIQ_ADDR, msgs, head, limit)
    return r


def send_batch_plain(p, msgs):
    """What ``send_batch_steady`` (a never-local producer's ``Producer._hot_batch``, the same steps
    in C) hands over before its draw, and their reference: ``p.send_batch(msgs)`` of a uniform
    batch (``encode_plain_batch``) to a topic a send has checked (``p._sendable``) over TCP, its
    first try made here, as ``send_plain`` makes a plain message's: the queue's route and
    batch template from the producer's cache (``_batch_targets``), the round robin drawn from the
    producer's counter after the body is encoded (as ``_send_batch`` draws it after
    ``_batch_body``), the thread's open sync connection. Returns None with nothing sent (nor the
    round robin drawn from) when the batch, the route or the producer is not ready so, and
    ``Producer._send_batch`` decides it from the start; a try that fails, or one not made (no
    connection yet), goes on in ``Producer._batch_tries`` from the queue drawn, with the same
    retries and errors.

    Why: ``_send_batch``'s general steps (``_batch_body``, ``_sendable``, ``_publish_info``,
    ``_select``, ``links.get``, ``master_addr``, ``exchange``, ``_frames.get``, ``_sync_conn``)
    were ~25,000 instructions of Python around the two C calls, half of a batch's client CPU."""
    s = p._lane_state
    if s is None:
        s = lane_state(p)
    if s.fault or s.links is not None or msgs.__class__ is not list or not msgs:
        return None
    inst = s.inst
    m0 = msgs[0]
    if inst is None or inst.rpc_hook is not None or m0.__class__ is not Message:
        return None
    topic, tags = m0.topic, m0.tags
    if topic.__class__ is not str or topic not in s.sendable or topic.startswith(RETRY_PREFIX):
        return None
    r = p._batch_routes.get(topic)
    if r is None or r[0] is not inst.publish.get(topic):
        r = _batch_targets(p, topic)
        if r is None:
            return None
    head = _tags_head(tags) if tags else b""
    if head is None:
        return None
    enc = encode_plain_batch(msgs, head, p.max_message_size)
    if enc is None or enc.__class__ is int:
        return None
    body, ids = enc
    info, targets = r
    deadline = time.monotonic() + s.timeout
    mq, t = targets[next(s.rr) % len(targets)]
    addr = inst.broker_addrs.get(mq.broker_name, _NONE).get(0)
    conns = getattr(p._tls, "conns", None)
    c = conns.get(addr) if conns is not None and addr is not None else None
    failed = None
    if c is not None:
        try:
            r = _exchange(p, addr, c, t, mq, 0, None, body, ids, deadline, s.timeout)
            if r is not None:
                return r
        except (RemotingError, BrokerError) as e:
            failed = e
    return p._batch_tries(body, ids, info, deadline, mq, failed)


def _batch_targets(p, topic: str):
    """(the topic's TopicPublishInfo, per queue (mq, its SEND_BATCH_MESSAGE template)), kept in
    ``p._batch_routes`` while the client's route is the same object; None: the general path's."""
    info = p.instance.publish.get(topic)
    if info is None or not info.queues:
        return None
    targets = [(mq, p._frames.get(mq, p.create_topic_key, p.default_queue_nums, True, False).template)
               for mq in info.queues]
    if any(t is None for _, t in targets):
        return None
    if len(p._batch_routes) >= 4096:  # a bounded cache, rebuilt as used
        p._batch_routes.clear()
    r = p._batch_routes[topic] = (info, targets)
    return r


def _resume(p, body: bytes, ids: bytes, info, mq, addr, c, opaque: int, deadline: float, out):
    """``send_batch_steady``'s batch after its round robin was drawn, as ``send_batch_plain`` goes
    on after its ``_exchange``: ``out`` None (no connection open for ``addr``, or bytes read
    ahead: no try made), an int (nothing sent), the OSError the try raised, or the bytes read that
    the C reader did not take; the rest in ``Producer._batch_tries`` from the queue drawn."""
    failed = None
    if out is not None:
        try:
            if isinstance(out, OSError):
                raise _broken(p, addr, c, out) from None
            r = _settle(p, addr, c, mq, opaque, out, deadline)
            if r is not None:
                return r
        except (RemotingError, BrokerError) as e:
            failed = e
    return p._batch_tries(body, ids, info, deadline, mq, failed)


#: ``Producer._hot_batch`` of a producer that never sends locally: ``p.send_batch(msgs)``'s steady
#: case whole in C (native/sync_send.c ``batch``: the steps of ``send_batch_plain``, the same
#: objects read), ``send_batch_plain`` for every batch it does not take before drawing the round
#: robin, ``_resume`` for a try it did not finish
send_batch_steady = _sync.batch
_sync.bind_batch(hot_encode_batch, _UNIQ_ADDR, Message, _tags_head, send_batch_plain, _resume, RETRY_PREFIX)
