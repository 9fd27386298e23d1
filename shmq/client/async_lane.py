"""A plain ``send_async`` over TCP: one C call (``native/hot_oneway.c``'s ``put_async``) writes its
whole frame into the client's lane, draws its opaque and makes its waiter, the
``client.remote_send.AsyncSend`` the caller gets; the loop thread registers a segment's waiters
with the connection and writes the segment, a burst at a time, and the answers are completed in
C from the read buffer (``native/remote_answer.c``), or by the Python path when
SHMQ_ANSWER_FAST=0.

Why: the general path cost the caller ~3 us (the properties text, a RemoteSend, the AsyncSend's
two ``__init__``, a job tuple) and the loop thread ~1.2 us per send (a drain step, the frame
made from the template, the waiter registered), RESULTS "Session 4, tcpcli". Here the caller
makes two Python calls and the loop thread does nothing per send.

Plain is ``oneway.plain``'s rule (this class, no keys, properties or delay, a body sent as is, a
topic checked before, no request signing), with a queue template. The frame is the template
path's byte for byte but for its opaque, negative here (hot_oneway.c says why), and it keeps its
place among the lane's oneways and every other request (the lane's segments and the jobs deque).
What a send promises is the general path's: a retry on the same broker after a connection error,
a timeout or a retryable code (``AsyncSend.submit`` rebuilds the request from the waiter's
``req``, the Message, as Java's async send retries with the message it was given), a timeout or
a lost connection reaching each future once (``Connection.start_lane`` registers the waiters,
``Connection.expire`` and ``connection_lost`` fail them).
"""
from __future__ import annotations

from shmq.native import _answer, _oneway

from .oneway import EMONTH, UNSUPPORTED, _UNIQ, lane_state, pick, plain, wait_room
from .remote_send import AsyncSend
from .send_future import SendFuture

_oneway.bind_async(AsyncSend)
_oneway.bind_pending(_answer.Pending, _answer.Run)  # a segment's waiters, the connection's table
# the answered case of AsyncSend.result in C (hot_oneway.c as_result), the rest SendFuture's
AsyncSend.result = _oneway.bind_result(SendFuture.result)
_NONE: dict = {}
__all__ = ["pick", "send_plain_async"]  # pick: the lane's route (oneway.py), also the sync send's


def send_plain_async(p, msg, callback, timeout):
    """``p.send_async(msg, callback, timeout)`` through the lane: its AsyncSend, the local send's
    result (a SendFuture) when the broker's store is mapped here, or None (nothing sent: the
    caller takes the general path). Raises what the route or the bound raises (nothing sent)."""
    s = p._lane_state
    if s is None:
        s = lane_state(p)
    if s.fault or not plain(s, msg):  # (the latency-fault selection is the general path's)
        return None
    picked = pick(p, s, msg.topic)
    if picked is None:
        return None
    info, mq, target = picked
    links = s.links
    if links is not None and not info.via_default:
        link = links.get(mq.broker_name)
        if link is not None:
            return p._async_local(link, mq, msg, info, callback)
    addr = s.inst.broker_addrs.get(mq.broker_name, _NONE).get(0)
    if addr is None:
        return None  # the general path's error (and its retries)
    tags = msg.tags or None
    w = s.lane.put_async(addr, target.template.pieces, msg.flag, tags, msg.body, msg, p, callback, mq,
                         timeout or s.timeout, s.left)
    while w.__class__ is int:  # nothing written yet
        if w & UNSUPPORTED:
            return None
        if w & EMONTH:
            _UNIQ.roll()
        else:  # FULL: the lane's bound, shared with the oneways (RemotingTimeout: the caller's)
            wait_room(s.inst, addr, s.timeout)
        w = s.lane.put_async(addr, target.template.pieces, msg.flag, tags, msg.body, msg, p, callback, mq,
                             timeout or s.timeout, s.left)
    inst = s.inst
    if not s.lane.last_direct and not inst._drain_scheduled:  # a segment's marker is in the deque; its drain may have run
        inst._drain_scheduled = True
        inst.loop.call_soon_threadsafe(inst._drain_submitted)
    return w
