"""A plain ``send_oneway`` over TCP: its whole frame written by one C call into the client's
oneway lane (``native/hot_oneway.c``), which the loop thread writes a burst at a time.

A plain message here is what ``Producer._wire`` builds without a dict (this class, no keys,
properties or delay, a body sent as is, a topic checked before), with a queue template
(``protocol.headers.SendFrame``) and no request signing; every other oneway takes
``ClientInstance.submit_oneway``. The frame is the one the template path makes, byte for byte
(tests/unit/test_oneway_lane.py), but for its opaque: the lane numbers its frames itself, as
Java's client numbers every request from one counter (the broker answers no oneway, so an opaque
shared with a pending request on the same connection matches nothing).

What RocketMQ users expect of oneway is kept: no answer, no delivery guarantee, but frames put
to one address are written in the order they were put, after every request submitted before them
(the lane's segments and the jobs deque, ``ClientInstance._drain_submitted``); the caller waits
while the bytes queued (lane and ``submit_oneway`` together) are over ONEWAY_BACKLOG_BYTES or the
connection's transport is paused, and gets RemotingTimeout after the producer's send_timeout.
"""
from __future__ import annotations

import time

from shmq.errors import RemotingTimeout
from shmq.native import _oneway, ffi, lib
from shmq.protocol.transport import SCATTER_BODY

from .message import Message
from .send_future import done_future
from .uniq_id import generator

_UNIQ = generator()
_oneway.bind(int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_uniq_ids"))), int(ffi.cast("uintptr_t", _UNIQ.c)))

Lane, AsyncPlain = _oneway.Lane, _oneway.AsyncPlain
NEW, LOOK, FULL, EMONTH, UNSUPPORTED = _oneway.NEW, _oneway.LOOK, _oneway.FULL, _oneway.EMONTH, _oneway.UNSUPPORTED
#: Bodies below this go through the lane (larger ones are written uncopied, as RemotingCommands)
BODY_MAX = SCATTER_BODY


class LaneMark:
    """The job a lane's new segment puts in the client's deque: its drain takes that segment."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<oneway lane segment>"


MARK = LaneMark()
_NONE: dict = {}


class LaneState:
    """What a producer's plain sends read of it, in slots: a Producer's own attributes cost ~35-45
    ns each to read (its instance dict is not specialized), ~10 per send. Made when first needed
    and dropped by ``Producer.__setattr__`` whenever an attribute of the producer is set, so it
    is never stale; the objects it shares (the topics checked, the round robin, the client) are
    the producer's own."""

    __slots__ = ("inst", "lane", "sendable", "rr", "limit", "fault", "links", "timeout", "left", "routes", "plan")

    def __init__(self, p):
        self.inst = inst = p.instance
        self.lane = inst.oneway_lane if inst is not None else None
        self.sendable, self.rr, self.fault = p._sendable, p._rr, p.latency_fault
        # a body the lane takes: not compressed, within the producer's size, written copied
        self.limit = min(p.compress_over, p.max_message_size, BODY_MAX - 1)
        self.links = None if p.links is None or p.links.mode == "never" else p.links
        self.timeout, self.left = p.send_timeout, p.retry_times_async
        self.routes: dict = {}  # topic -> (its TopicPublishInfo, the lane's targets per queue)
        # send_async's C step (native/async_plain.c, ProducerBase._hot_async): these same objects,
        # for a producer whose plain sends all take the lane (no local links, no fault selection)
        self.plan = (AsyncPlain(self.lane, inst, inst.publish, inst.broker_addrs, self.sendable, self.rr, self.routes, p,
                                Message, self.timeout, self.left, done_future, self.limit)
                     if self.lane is not None and self.links is None and not self.fault else None)


def plain(s: LaneState, msg) -> bool:
    """``msg`` may take the lane (a oneway or an async send; the module comment says what plain
    is): ``s`` is its producer's LaneState."""
    body, tags = msg.body, msg.tags
    return (msg.__class__ is Message and msg.topic.__class__ is str and msg.topic in s.sendable and not msg.keys
            and not msg.delay_level and body.__class__ is bytes and 0 < len(body) <= s.limit and not msg.properties
            and (not tags or (tags.__class__ is str and tags.isprintable()))
            and s.inst is not None and s.inst.rpc_hook is None)


def lane_state(p) -> LaneState:
    s = p._lane_state
    if s is None:
        s = p._lane_state = LaneState(p)
        p._hot_async = s.plan  # (Producer.__setattr__ drops both together)
    return s


def send_plain(p, msg) -> bool:
    """``p.send_oneway(msg)`` through the lane; False (nothing sent) when ``msg`` is not plain,
    and the caller takes the general path. That is decided before the round robin is drawn
    from, but for a group or topic holding a template stand-in (``SendFrame.of``)."""
    if not plain(lane_state(p), msg):
        return False
    body, topic, tags = msg.body, msg.topic, msg.tags
    inst = p.instance
    # Producer._publish_info / _select / links.get / master_addr, their common case inline (a
    # method call is ~10 % of this whole send)
    info = inst.publish.get(topic)
    if info is None or not info.queues:
        info = p._publish_info(topic)
    queues = info.queues
    mq = queues[next(p._rr) % len(queues)] if not p.latency_fault else p._select(info, None)
    links = p.links
    link = None if info.via_default or links.mode == "never" else links.get(mq.broker_name)
    if link is not None:
        p._oneway_local(link, mq, msg, info)
        return True
    addr = inst.broker_addrs.get(mq.broker_name, _NONE).get(0)
    if addr is None:
        return True  # as send_oneway: dropped, the caller asked not to hear
    t = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, True).template
    if t is None:
        return False
    lane = inst.oneway_lane
    st = lane.put(addr, t.pieces, 0, msg.flag, tags or None, body)
    while st > NEW:  # nothing written yet
        if st & UNSUPPORTED:  # a control character in the tags (isprintable let none by): Python's
            return False      # encoder escapes them
        if st & EMONTH:
            _UNIQ.roll()
        else:
            wait_room(inst, addr, p.send_timeout)
        st = lane.put(addr, t.pieces, 0, msg.flag, tags or None, body)
    if st and not inst._drain_scheduled:  # a new segment: its marker is in the deque
        inst._drain_scheduled = True
        inst.loop.call_soon_threadsafe(inst._drain_submitted)
    return True


def wait_room(inst, addr: str, timeout: float) -> None:
    """Wait while the client's oneway bound is reached or ``addr``'s connection takes nothing;
    RemotingTimeout after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while inst._oneway_full() or inst._write_paused(addr):
        if time.monotonic() > deadline:
            raise RemotingTimeout(f"oneway send to {addr}: the connection took nothing for {timeout:g}s")
        time.sleep(0.0005)
