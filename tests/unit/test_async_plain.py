"""``Producer.send_async`` of a plain message is one C call (ProducerBase.send_async ->
native/async_plain.c's AsyncPlain): what it writes and the future it returns are the Python
path's (async_lane.send_plain_async) byte for byte, but for the UNIQ_KEY, born time and opaque
each send draws; anything it does not take exactly goes to the Python method with nothing
written, and a changed producer setting is seen by the next send."""
import itertools
import socket

import pytest

from shmq.client.async_lane import send_plain_async
from shmq.client.message import Message, MessageQueue
from shmq.client.oneway import AsyncPlain
from shmq.client.producer import Producer
from shmq.client.remote_send import AsyncSend
from shmq.client.route import TopicPublishInfo
from shmq.client.send_future import SendFuture
from shmq.errors import RemotingError
from shmq.protocol.command import decode_command, json_text

from .test_oneway_lane import TAGS, _frames


@pytest.fixture
def prod():
    """A started producer whose loop never drains its lane (the frames stay to be read here):
    topic T routed to 4 queues of broker "b" at a dead address, already checked."""
    ns = socket.create_server(("127.0.0.1", 0))  # a NameServer nobody asks: the route is set by hand
    p = Producer("pg-plain", f"127.0.0.1:{ns.getsockname()[1]}", local="never").start()
    inst = p.instance
    inst.broker_addrs["b"] = {0: "127.0.0.1:1"}
    inst.publish["T"] = TopicPublishInfo("T", [MessageQueue("T", "b", q) for q in range(4)])
    p._sendable.add("T")
    inst._drain_scheduled = True  # the loop is never asked to drain
    try:
        yield p
    finally:
        inst.oneway_lane.clear()
        inst._submitted.clear()
        inst._drain_scheduled = False
        p.shutdown()
        ns.close()


def _taken(p) -> list[tuple[bytes, object]]:
    """Every frame put in the lane since the last call, with its waiter, in order."""
    lane, out = p.instance.oneway_lane, []
    for _, data, waiters, _ in iter(lane.take, None):
        for raw, w in zip(_frames(data), (waiters or {}).values(), strict=True):
            out.append((raw, w))
    p.instance._submitted.clear()
    return out


def _slots(w) -> tuple:
    return (w.__class__, w.mq, w.req, w.timeout, w.left, w.producer, w._callback, w.done())


def _general_frame(raw: bytes, w) -> bytes:
    """The general path's frame of w's send (its request rebuilt from the message, with the same
    UNIQ_KEY, as a retry does), with the frame's own born time and opaque."""
    cmd = decode_command(raw[4:])
    req = w._request(w.req)
    req.born_ms = int(cmd.ext_fields["g"])
    return req.frame(cmd.opaque)


def test_the_c_send_writes_the_python_paths_frames_and_makes_its_waiters(prod):
    p = prod
    p.send_async(Message("T", b"first"))  # the Python method makes the plan and the route cache
    _taken(p)
    assert p._hot_async.__class__ is AsyncPlain
    cb = lambda r: None  # noqa: E731
    cases = [(tags, flag, timeout, callback) for tags in TAGS for flag in (0, 7)
             for timeout, callback in ((None, None), (2.5, cb), (0, cb))]
    got = {"c": [], "py": []}
    for i, (tags, flag, timeout, callback) in enumerate(cases):
        m = Message("T", b"b%d" % i * (i + 1), tags=tags, flag=flag)
        wc = p.send_async(m, callback, timeout)
        wp = send_plain_async(p, m, callback, timeout)
        assert wc.__class__ is AsyncSend and wp.__class__ is AsyncSend and wc.uniq != wp.uniq
        for path, (raw, w) in zip(("c", "py"), _taken(p), strict=True):
            assert raw == _general_frame(raw, w)  # each byte for byte the template path's
            got[path].append((_slots(w), decode_command(raw[4:]).opaque < 0))
        assert _slots(wc)[1:] == (wc.mq, m, timeout or p.send_timeout, p.retry_times_async, p, callback, False)
    for (sc, neg_c), (sp, neg_p) in zip(got["c"], got["py"], strict=True):
        assert sc[0] == sp[0] and sc[2:] == sp[2:] and neg_c and neg_p  # the same waiter, negative opaques
        assert sp[1].queue_id == (sc[1].queue_id + 1) % 4  # the next queue of the one round robin


def test_the_round_robin_is_the_producers_own_on_both_paths(prod):
    p = prod
    p.send_async(Message("T", b"x"))
    sends = [p.send_async(Message("T", b"x")) if i % 2 else send_plain_async(p, Message("T", b"x"), None, None)
             for i in range(12)]
    q = [w.mq.queue_id for w in sends]
    assert q == [(q[0] + i) % 4 for i in range(12)]


def test_the_round_robin_is_drawn_as_next_draws_it_in_and_out_of_the_counts_fast_mode(prod):
    """plan_route advances the producer's itertools.count in place in its fast mode (an int start,
    a step of 1: no int made) and calls next() in any other: the queues and the count are next()'s
    either way, whichever path draws."""
    p = prod
    for start, step in ((5, 1), (5, 3)):  # fast mode, then the count's slow mode
        p._rr = itertools.count(start, step)  # (drops the LaneState: the next send makes a new plan)
        sends = [p.send_async(Message("T", b"x")) for _ in range(6)]
        assert [w.mq.queue_id for w in sends] == [(start + i * step) % 4 for i in range(6)]
        assert next(p._rr) == start + 6 * step


def _not_taken(p, m) -> None:
    lane = p.instance.oneway_lane
    before = lane.queued
    assert p._hot_async(m, None, None) is None and lane.queued == before


class MyMessage(Message):
    __slots__ = ()


def test_what_the_c_send_does_not_take_is_sent_by_the_python_method_with_nothing_written(prod):
    p = prod
    p.send_async(Message("T", b"x"))
    _taken(p)
    big = b"x" * (p._lane_state.limit + 1)
    for m in (Message("T", b"x", keys="k"), Message("T", b"x", properties={"a": "1"}), Message("T", b"x", delay_level=2),
              Message("T", b"x", delay=5), Message("T", b"x", tags="a\nb"), Message("T", b"x", tags="\x01"),
              Message("T", big), MyMessage("T", b"x"), Message("U", b"x")):
        _not_taken(p, m)
        f = p.send_async(m)  # the Python method: the general path (not the lane), or the lane for MyMessage's
        assert isinstance(f, SendFuture)
    class Keys(list):  # a type whose truth is Python code: the Python path tests it
        def __len__(self):
            return 0

    class Timeout(float):
        pass

    for m, timeout in ((Message("T", b"x", keys=Keys(["k"])), None), (Message("T", b"x", flag=True), None),
                       (Message("T", b"x"), Timeout(2.0))):
        before = p.instance.oneway_lane.queued
        assert p._hot_async(m, None, timeout) is None and p.instance.oneway_lane.queued == before
        f = p.send_async(m, None, timeout)
        assert f.__class__ is AsyncSend and f.timeout == (timeout or p.send_timeout)  # the lane, from Python
    m = Message("T", b"x")
    del m.flag  # an unset attribute: the Python path raises it (into the future)
    _not_taken(p, m)
    assert isinstance(p.send_async(m).exception(0), AttributeError)
    # a route not in the cache, or changed: the Python method (re)builds it, the next send is C's
    inst = p.instance
    inst.publish["T"] = TopicPublishInfo("T", [MessageQueue("T", "b", 0)])
    _not_taken(p, Message("T", b"x"))
    assert p.send_async(Message("T", b"x")).mq.queue_id == 0
    assert p._hot_async(Message("T", b"x"), None, None).__class__ is AsyncSend
    # no master address: the general path's error, through its retries
    inst.broker_addrs["b"] = {}
    _not_taken(p, Message("T", b"x"))
    assert isinstance(p.send_async(Message("T", b"x")).exception(0), RemotingError)
    inst.broker_addrs["b"] = {0: "127.0.0.1:1"}
    # the lane full (its bound): nothing written, the Python path waits for room as before
    lane = inst.oneway_lane
    lane.charge(1 << 30)
    try:
        _not_taken(p, Message("T", b"x"))
    finally:
        lane.charge(-(1 << 30))
    # a request signer: never the lane's
    inst.rpc_hook = lambda *a: None
    try:
        _not_taken(p, Message("T", b"x"))
    finally:
        inst.rpc_hook = None
    _taken(p)


def test_send_async_binds_its_arguments_as_the_python_signature_does(prod):
    p = prod
    p.send_async(Message("T", b"x"))
    cb = lambda r: None  # noqa: E731
    for args, kw, want in (((), {"callback": cb}, (cb, 3.0)), ((), {"timeout": 1.5}, (None, 1.5)),
                           ((cb,), {"timeout": 1.5}, (cb, 1.5)), ((), {"timeout": 1.5, "callback": cb}, (cb, 1.5)),
                           ((None, None), {}, (None, 3.0))):
        w = p.send_async(Message("T", b"x"), *args, **kw)
        assert (w._callback, w.timeout) == want
    w = p.send_async(msg=Message("T", b"x"), callback=cb)  # by name: the Python method binds it
    assert w._callback is cb
    for args, kw in (((cb,), {"callback": cb}), ((), {"cb": cb}), ((cb, 1.0, 2), {})):
        with pytest.raises(TypeError):
            p.send_async(Message("T", b"x"), *args, **kw)
    _taken(p)


def test_a_producer_setting_changed_is_seen_by_the_next_send(prod):
    p = prod
    assert p.send_async(Message("T", b"x")).timeout == 3.0
    assert p._hot_async is not None
    p.send_timeout = 1.25
    assert p._hot_async is None and p._lane_state is None
    assert p.send_async(Message("T", b"x")).timeout == 1.25
    assert p.send_async(Message("T", b"x")).timeout == 1.25 and p._hot_async is not None
    p.retry_times_async = 0
    assert p.send_async(Message("T", b"x")).left == 0
    p.latency_fault = True  # the fault selection is the Python path's: no plan
    p.send_async(Message("T", b"x"))
    assert p._hot_async is None
    _taken(p)


class _ClosedLoop:
    def call_soon_threadsafe(self, fn):
        raise RuntimeError("Event loop is closed")


@pytest.mark.parametrize("path", ["c", "py"])
def test_an_error_scheduling_the_drain_is_the_futures_on_both_paths(prod, path):
    p = prod
    p.send_async(Message("T", b"x"))
    inst = p.instance
    loop, inst.loop, inst._drain_scheduled = inst.loop, _ClosedLoop(), False
    calls = []
    try:
        if path == "py":
            p._hot_async = None  # the plan dropped: the Python method alone
        f = p.send_async(Message("T", b"x"), calls.append)
    finally:
        inst.loop = loop
        inst._drain_scheduled = True
    assert f.__class__ is SendFuture and isinstance(f.exception(0), RuntimeError)
    assert calls == [f.exception(0)]
    _taken(p)


def test_sync_route_is_the_python_rule_and_round_robin(prod):
    """A sync send()'s C step (``AsyncPlain.sync``, client/sync_send.send_plain) answers what its
    Python form (``sync_send._plain_route``) answers: the same route, queue order, master address,
    template and fields; None with nothing drawn from the round robin when the message is not
    plain, and the queue drawn with address None when the client knows no master."""
    from shmq.client.sync_send import _plain_route
    p = prod
    p.send_async(Message("T", b"first"))  # the Python method makes the plan and the route cache
    _taken(p)
    s = p._lane_state
    plan = s.plan
    templates = {mq: t.template for mq, t, *_ in s.routes["T"][1]}  # the cache both read
    last = None
    for tags in TAGS:
        for flag in (0, 7):
            m = Message("T", b"x" * 10, tags=tags, flag=flag)
            a, b = plan.sync(m), _plain_route(p, s, m)
            assert a is not None and b is not None
            assert a[0] is b[0] and a[2] == b[2] == "127.0.0.1:1" and a[4:] == b[4:]
            assert a[3] is templates[a[1]] and b[3] is templates[b[1]]
            assert a[1].__class__ is MessageQueue and a[4:] == (flag, tags or None, m.body)
            assert (a[1].queue_id + 1) % 4 == b[1].queue_id  # each drew one step, in turn
            last = b[1].queue_id
    for m in (Message("T", b"x", keys="k"), Message("U", b"x"), Message("T", b""), Message("T", b"x", tags="a\nb"),
              Message("T", b"x", delay_level=2), Message("T", b"x", properties={"k": "v"})):
        assert plan.sync(m) is None and _plain_route(p, s, m) is None
    a = plan.sync(Message("T", b"x"))
    assert a[1].queue_id == (last + 1) % 4  # nothing drawn by the refusals
    del p.instance.broker_addrs["b"]
    a = plan.sync(Message("T", b"x"))
    assert a[2] is None and a[1].queue_id == (last + 2) % 4


def _lane_frames(p) -> list[bytes]:
    """Every frame put in the lane since the last call (oneways: no waiters), in order."""
    lane, out = p.instance.oneway_lane, []
    for _, data, waiters, _ in iter(lane.take, None):
        assert waiters is None
        out += _frames(data)
    p.instance._submitted.clear()
    return out


def _oneway_general_frame(p, raw: bytes, mq) -> bytes:
    """The general path's frame of the oneway send in ``raw`` (its Message rebuilt from the frame:
    the same UNIQ_KEY, tags, flag and body), with the frame's own born time and opaque."""
    from shmq.protocol.headers import decode_send_header
    cmd = decode_command(raw[4:])
    h = decode_send_header(cmd.code, cmd.ext_fields)
    target = p._frames.get(mq, p.create_topic_key, p.default_queue_nums, False, True)
    return target.template.frame(h.sysFlag, h.bornTimestamp, h.flag, json_text(h.properties), cmd.body, cmd.opaque)


def test_the_c_oneway_writes_the_python_paths_frames_and_shares_the_round_robin(prod):
    """``send_oneway`` of a plain message is one C call (AsyncPlain.oneway, from ProducerBase's
    send_oneway): each frame is the one its Python form (oneway.send_plain) writes, byte for byte
    but for the UNIQ_KEY, born time and opaque each send draws, to the queue the one round robin
    gives next; what it does not take goes to the Python method with nothing written or drawn."""
    from shmq.client.oneway import send_plain
    from shmq.protocol.command import decode_command as dc
    p = prod
    p.send_oneway(Message("T", b"first"))  # the Python method makes the plan and the route cache
    _lane_frames(p)
    assert p._hot_async.__class__ is AsyncPlain
    queues = []
    for i, tags in enumerate(TAGS):
        for flag in (0, 7):
            m = Message("T", b"o%d" % i * (i + 1), tags=tags, flag=flag)
            assert p._hot_async.oneway(m) is True  # C
            assert send_plain(p, m) is True        # Python
            fc, fp = _lane_frames(p)
            a, b = dc(fc[4:]), dc(fp[4:])
            assert a.flag == b.flag and a.flag & 2  # oneway
            qa, qb = int(a.ext_fields["e"]), int(b.ext_fields["e"])
            assert qb == (qa + 1) % 4  # each drew one step of the producer's round robin, in turn
            queues += [qa, qb]
            for raw, cmd in ((fc, a), (fp, b)):
                mq = MessageQueue("T", "b", int(cmd.ext_fields["e"]))
                assert raw == _oneway_general_frame(p, raw, mq)  # the template path's frame
            strip = lambda c: {k: v for k, v in c.ext_fields.items() if k not in "gie"}  # noqa: E731
            assert strip(a) == strip(b) and a.body == b.body == m.body
            pa, pb = a.ext_fields["i"], b.ext_fields["i"]
            assert pa.split("UNIQ_KEY")[0] == pb.split("UNIQ_KEY")[0]  # the same tags, another id
    assert queues == [(queues[0] + i) % 4 for i in range(len(queues))]
    # not plain: None from C, nothing written, nothing drawn; the public method sends it anyway
    for m in (Message("T", b"x", keys="k"), Message("T", b"x", properties={"a": "1"}), Message("T", b"x", delay_level=2),
              Message("T", b"x", tags="a\nb"), MyMessage("T", b"x"), Message("U", b"x")):
        before = p.instance.oneway_lane.queued
        assert p._hot_async.oneway(m) is None and p.instance.oneway_lane.queued == before
    m = Message("T", b"x")
    assert p._hot_async.oneway(m) is True
    assert int(dc(_lane_frames(p)[0][4:]).ext_fields["e"]) == (queues[-1] + 1) % 4  # nothing drawn meanwhile
    # no master address: dropped by both, as the caller asked not to hear (the round robin drawn)
    del p.instance.broker_addrs["b"]
    assert p._hot_async.oneway(Message("T", b"x")) is True and send_plain(p, Message("T", b"x")) is True
    assert p.send_oneway(Message("T", b"x")) is None and _lane_frames(p) == []


def test_the_c_oneway_waits_for_room_and_rolls_the_ids_as_python_does(prod):
    """A put the lane answers LOOK (every 32nd) or FULL waits in oneway.wait_room and is made
    again; RemotingTimeout when the lane stays full: the C call raises it as the Python one does."""
    from shmq.errors import RemotingTimeout
    p = prod
    p.send_oneway(Message("T", b"first"))
    _lane_frames(p)
    for _ in range(70):  # past two LOOK answers: each frame is written once
        p.send_oneway(Message("T", b"y"))
    assert len(_lane_frames(p)) == 70
    lane = p.instance.oneway_lane
    lane.charge(1 << 40)  # the bound reached: nothing is taken while it lasts
    p.send_timeout = 0.05  # (a new LaneState: the next send is Python's, then C's)
    for _ in range(2):
        with pytest.raises(RemotingTimeout):
            p.send_oneway(Message("T", b"z"))
    lane.charge(-(1 << 40))
    assert _lane_frames(p) == []


def test_an_async_sends_result_is_send_futures_in_every_state(prod):
    """AsyncSend.result's answered case is C (hot_oneway.c as_result); pending, failed, a
    keyword timeout and a bad call are SendFuture.result's own Python, as before."""
    import threading
    p = prod
    p.send_async(Message("T", b"first"))
    _taken(p)
    w = p.send_async(Message("T", b"x"))
    assert AsyncSend.result is not SendFuture.result and w.__class__ is AsyncSend
    with pytest.raises(TimeoutError):
        w.result(0.01)
    with pytest.raises(TimeoutError):
        w.result(timeout=0.01)
    with pytest.raises(TypeError):
        w.result(1, 2)
    with pytest.raises(TypeError):
        w.result(bogus=1)
    threading.Timer(0.05, w._resolve, ("done",)).start()  # (SendFuture.set_result)
    assert w.result() == "done" and w.result(0) == "done" and w.result(timeout=None) == "done"
    f = p.send_async(Message("T", b"y"))
    SendFuture.set_exception(f, RemotingError("lost"))  # (AsyncSend.set_exception would retry)
    with pytest.raises(RemotingError):
        f.result()
    _taken(p)


def _addrs_taken(p) -> list:
    """The address and queue of every async send put in the lane since the last call, in order."""
    out = []
    for addr, _, waiters, _ in iter(p.instance.oneway_lane.take, None):
        out += [(addr, w.mq.broker_name) for w in (waiters or {}).values()]
    p.instance._submitted.clear()
    return out


def test_a_route_or_address_changed_is_seen_by_the_next_c_send(prod):
    """The C send keeps its last route and address look-ups while the dicts they came from are
    unchanged: any change of them (an entry set again, an inner dict replaced or changed, a new
    route) is seen by the very next send, as the look-ups would see it."""
    p, inst = prod, prod.instance
    p.send_async(Message("T", b"first"))  # the Python method makes the plan and the route cache
    for _ in range(3):
        p.send_async(Message("T", b"x"))
    assert p._hot_async.__class__ is AsyncPlain
    assert {a for a, _ in _addrs_taken(p)} == {"127.0.0.1:1"}
    inst.broker_addrs["b"][0] = "127.0.0.1:2"  # the inner dict changed in place
    p.send_async(Message("T", b"x"))
    assert _addrs_taken(p) == [("127.0.0.1:2", "b")]
    inst.broker_addrs["b"] = {0: "127.0.0.1:3"}  # a new inner dict
    p.send_async(Message("T", b"x"))
    assert _addrs_taken(p) == [("127.0.0.1:3", "b")]
    inst.broker_addrs["c"] = {0: "127.0.0.1:4"}  # a new route to another broker
    inst.publish["T"] = TopicPublishInfo("T", [MessageQueue("T", "c", q) for q in range(2)])
    for _ in range(3):
        p.send_async(Message("T", b"x"))
    assert _addrs_taken(p) == [("127.0.0.1:4", "c")] * 3
    inst.broker_addrs["c"] = {}  # no master address: the general path's (nothing in the lane)
    with pytest.raises(Exception):
        p.send_async(Message("T", b"x")).result(5)
    assert all(a != "127.0.0.1:4" for a, _ in _addrs_taken(p))


def test_a_request_signer_set_or_unset_is_seen_by_the_next_c_send_of_every_kind(prod):
    """The C sends (async, oneway, sync) look at the lane's copy of ``ClientInstance.rpc_hook``:
    a signer set after the plan exists leaves every kind to the Python path with nothing written
    or drawn, and unset again the next send is C's."""
    p = prod
    p.send_async(Message("T", b"first"))  # the plan and the route cache
    _taken(p)
    inst, plan = p.instance, p._hot_async
    assert plan.__class__ is AsyncPlain and inst.oneway_lane.hooked is False
    inst.rpc_hook = lambda cmd: None
    try:
        assert inst.oneway_lane.hooked is True
        m = Message("T", b"x")
        _not_taken(p, m)
        assert plan.oneway(m) is None and plan.sync(m) is None and inst.oneway_lane.queued == (0, 0)
    finally:
        inst.rpc_hook = None
    assert inst.oneway_lane.hooked is False
    q0 = plan.sync(Message("T", b"x"))[1].queue_id  # nothing was drawn by the refusals above
    assert p.send_async(Message("T", b"x")).mq.queue_id == (q0 + 1) % 4
    assert plan.oneway(Message("T", b"x")) is True
    assert inst.oneway_lane.queued[1] == 2  # both written, C's


def test_a_client_made_with_credentials_has_its_lane_marked_signed():
    from shmq.client.instance import ClientInstance
    from shmq.protocol.acl_sign import Credentials
    ns = socket.create_server(("127.0.0.1", 0))
    inst = ClientInstance(f"127.0.0.1:{ns.getsockname()[1]}", credentials=Credentials("ak", "sk12345678"))
    try:
        assert inst.rpc_hook is not None and inst.oneway_lane.hooked is True
    finally:
        inst.release()
        ns.close()


def test_a_send_made_in_a_freed_ones_memory_holds_only_its_own(prod):
    """AsyncSends freed are kept for the next puts (hot_oneway.c as_free): a send made there is
    tracked by the cyclic GC, pending, and holds its own message, queue, callback and timeout."""
    import gc
    import weakref
    p = prod
    p.send_async(Message("T", b"first"))
    _taken(p)
    class Callback:
        def __call__(self, r) -> None:
            pass

    old = [p.send_async(Message("T", b"o%d" % i), Callback(), 1.5) for i in range(100)]
    _taken(p)
    freed = {id(w) for w in old}
    wm = weakref.ref(old[0]._callback)
    del old
    assert wm() is None
    cb = lambda r: None  # noqa: E731
    new = [(p.send_async(m := Message("T", b"n%d" % i), cb if i % 2 else None, 2.0 if i % 3 else None), m)
           for i in range(100)]
    assert any(id(w) in freed for w, _ in new)  # (the kept memory reused)
    for i, (w, m) in enumerate(new):
        assert gc.is_tracked(w) and not w.done()
        assert w.req is m and w._callback is (cb if i % 2 else None) and w.timeout == (2.0 if i % 3 else 3.0)
        assert w.mq.topic == "T" and w.left == p.retry_times_async
    assert [w for _, w in _taken(p)] == [w for w, _ in new]
    w, marker = new[0][0], Callback()
    w.req = [w, marker]  # a cycle through a reused send is collected
    wm = weakref.ref(marker)
    del new, w, marker
    gc.collect()
    assert wm() is None
