"""A plain ``send_oneway`` over TCP: its whole frame written by one C call into the client's
oneway lane (``native/hot_oneway.c``), which the loop thread writes a burst at a time. The whole
send is that one call from ``Producer.send_oneway`` (ProducerBase's C method, ``AsyncPlain.oneway``
in native/async_plain.c) once the LaneState's route cache has the topic; ``send_plain`` below is
its Python form, which fills the cache.

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
                                Message, self.timeout, self.left, done_future, self.limit, wait_room, _UNIQ.roll)
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


def _targets(p, s: LaneState, topic: str):
    """(the topic's TopicPublishInfo, per queue (mq, its SendTarget, its oneway SendTarget, their
    templates' pieces)) as the lane sends them, kept in ``s.routes`` while the client's route is the same object; None: the
    general path's."""
    info = s.inst.publish.get(topic)
    if info is None or not info.queues:
        info = p._publish_info(topic)
    frames, key, nums = p._frames, p.create_topic_key, p.default_queue_nums
    targets = [(mq, frames.get(mq, key, nums, False, False), frames.get(mq, key, nums, False, True))
               for mq in info.queues]
    if any(t.template is None or o.template is None for _, t, o in targets):
        return None
    # each with its templates' pieces, which the C sends write the frame from (a SendTarget's
    # template and its pieces never change: SendFrame is made once per target)
    targets = [(mq, t, o, t.template.pieces, o.template.pieces) for mq, t, o in targets]
    if len(s.routes) >= 4096:  # a bounded cache, rebuilt as used
        s.routes.clear()
    r = s.routes[topic] = (info, targets)
    return r


def targets_ahead(p, s: LaneState, topic: str, info) -> None:
    """``_targets`` of a topic whose route ``info`` just arrived (Producer._route_arrived), for a
    producer whose plain sends take the lane's route cache (``s.plan``): its first send finds its
    templates made. Not when the client holds another route (``_targets`` would fetch)."""
    if s.plan is not None and info.queues and s.inst.publish.get(topic) is info and s.inst.rpc_hook is None:
        _targets(p, s, topic)


def pick(p, s: LaneState, topic: str, oneway: bool = False):
    """The lane's next queue for ``topic``: (info, mq, its SendTarget, the oneway one when
    ``oneway``), the round robin drawn from the route ``s.routes`` keeps (``_targets``); None,
    nothing drawn, when there is none. The one Python pick of the plain async and oneway sends
    and of the sync send's fallback (native/async_plain.c's plan_route is the same in C)."""
    r = s.routes.get(topic)
    if r is None or r[0] is not s.inst.publish.get(topic):
        r = _targets(p, s, topic)
        if r is None:
            return None
    info, targets = r
    t = targets[next(s.rr) % len(targets)]
    return info, t[0], t[2 if oneway else 1]


def send_plain(p, msg) -> bool:
    """``p.send_oneway(msg)`` through the lane (``Producer._send_oneway``, after ProducerBase's C
    step, native/async_plain.c's ``oneway``, did not take it); False (nothing sent) when ``msg`` is
    not plain, and the caller takes the general path. That is decided before the round robin is
    drawn from, but with local links or the latency-fault selection, for a group or topic holding
    a template stand-in (``SendFrame.of``)."""
    s = lane_state(p)
    if not plain(s, msg):
        return False
    body, topic, tags = msg.body, msg.topic, msg.tags
    inst = p.instance
    if s.plan is not None:  # no links, no fault selection: the route cache the C step reads too
        picked = pick(p, s, topic, True)
        if picked is None:
            return False
        _, mq, target = picked
    else:
        # Producer._publish_info / _select / links.get, their common case inline
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
        target = None
    addr = inst.broker_addrs.get(mq.broker_name, _NONE).get(0)
    if addr is None:
        return True  # as send_oneway: dropped, the caller asked not to hear
    t = (target or p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, True)).template
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
