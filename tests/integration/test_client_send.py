"""Every send mode, over TCP and straight into the store (local), including compression, batch
limits and bad input; what a consumer receives is the same either way."""
from __future__ import annotations

import threading
from pathlib import Path

import pytest

from shmq import Message, Producer, SendStatus
from shmq.errors import InvalidMessage, InvalidTopic, MessageTooLarge, RemotingError

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import Collector, consumer, env, make_topic, wait_route  # noqa: F401 (env: a fixture)
from .conftest import namesrv, processes, start_namesrv  # noqa: F401

MODES = ["never", "always"]



def consume_all(ns, n, group="cg", topic="T", local="never", **kw):
    col = Collector()
    c = consumer(ns.addr, group, topic, col, local=local, **kw)
    try:
        assert col.wait_for(lambda s: len(s.msgs) >= n), f"{len(col.msgs)} of {n}"
    finally:
        c.shutdown()
    return col.msgs


def test_many_async_and_oneway_sends_from_two_threads_over_tcp_all_arrive_once(env):
    # send_async from several threads shares wake-ups of the client's loop thread, oneway goes
    # over each thread's own connection: none may be lost, doubled or left unanswered
    ns, b = env
    with Producer("pg-many", ns.addr, local="never") as p:
        results: list = []

        def sender(t: int) -> None:
            futs = [p.send_async(Message("T", b"a%d-%d" % (t, i))) for i in range(300)]
            for i in range(100):
                p.send_oneway(Message("T", b"o%d-%d" % (t, i)))
            results.extend(f.result(20) for f in futs)
        threads = [threading.Thread(target=sender, args=(t,)) for t in range(2)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        assert len(results) == 600 and all(r.status is SendStatus.SEND_OK for r in results)
        assert len({(r.queue.queue_id, r.queue_offset) for r in results}) == 600
    bodies = [m.body for m in consume_all(ns, 800, group="cg-many")]
    expected = {b"%s%d-%d" % (k, t, i) for t in range(2) for k, n in ((b"a", 300), (b"o", 100)) for i in range(n)}
    assert len(bodies) == 800 and set(bodies) == expected


def test_async_send_to_a_broker_that_went_away_fails_and_does_not_hang(env):
    # the request's waiter hears of the lost connection (or the refused reconnect, or the
    # timeout), its retries on the same broker fail too, and the future gets the error
    ns, b = env
    with Producer("pg-gone", ns.addr, local="never", send_timeout=2.0) as p:
        assert p.send_async(Message("T", b"before")).result(20).status is SendStatus.SEND_OK
        b.stop()
        futs = [p.send_async(Message("T", b"after-%d" % i)) for i in range(20)]
        for f in futs:
            with pytest.raises(RemotingError):
                f.result(20)


@pytest.mark.parametrize("local", MODES)
def test_every_send_mode(env, local):
    ns, b = env
    with Producer("pg", ns.addr, local=local) as p:
        r = p.send(Message("T", b"sync", tags="A", keys=["k-sync"], properties={"u": "1"}))
        assert r.status is SendStatus.SEND_OK and len(r.msg_id) == 32 and len(r.offset_msg_id) == 32
        fut = p.send_async(Message("T", b"async", tags="B"))
        called = threading.Event()
        got = []
        p.send_async(Message("T", b"async-cb"), callback=lambda res: (got.append(res), called.set()))
        assert fut.result(10).status is SendStatus.SEND_OK
        assert called.wait(10) and got[0].status is SendStatus.SEND_OK
        p.send_oneway(Message("T", b"oneway"))
        rb = p.send_batch([Message("T", b"batch-%d" % i, keys=f"bk{i}") for i in range(10)])
        assert rb.msg_id.count(",") == 9
        ro = p.send_orderly(Message("T", b"orderly"), lambda qs, m, arg: qs[arg % len(qs)], 3)
        assert ro.queue.queue_id == 3
        big = bytes(range(256)) * 40  # 10 KiB: compressed on the wire, not for the consumer
        rbig = p.send(Message("T", big))
        assert rbig.status is SendStatus.SEND_OK
    msgs = consume_all(ns, 16)
    by_body = {m.body: m for m in msgs}
    assert set(by_body) == {b"sync", b"async", b"async-cb", b"oneway", b"orderly", big,
                            *(b"batch-%d" % i for i in range(10))}
    s = by_body[b"sync"]
    assert s.tags == "A" and s.keys == ["k-sync"] and s.properties["u"] == "1" and s.msg_id == r.msg_id
    assert by_body[b"orderly"].queue_id == 3
    assert by_body[big].sysflag & 1  # stored compressed, delivered decompressed
    batch = sorted((m for m in msgs if m.body.startswith(b"batch-")), key=lambda m: m.queue_offset)
    assert len({m.queue_id for m in batch}) == 1
    assert [m.queue_offset for m in batch] == list(range(batch[0].queue_offset, batch[0].queue_offset + 10))


@pytest.mark.parametrize("local", MODES)
def test_bad_input_is_refused_before_sending(env, local):
    ns, _ = env
    with Producer("pg", ns.addr, local=local) as p:
        with pytest.raises(InvalidTopic):
            p.send(Message("bad topic", b"x"))
        with pytest.raises(InvalidTopic):
            p.send(Message("SCHEDULE_TOPIC_XXXX", b"x"))
        with pytest.raises(InvalidMessage, match="zero"):
            p.send(Message("T", b""))
        with pytest.raises(MessageTooLarge):
            p.send(Message("T", b"x" * (4 * 1024 * 1024 + 1)))
        with pytest.raises(InvalidMessage, match="same"):
            p.send_batch([Message("T", b"a"), Message("U", b"b")])
        with pytest.raises(InvalidMessage, match="Delay"):
            p.send_batch([Message("T", b"a", delay_level=2)])
        with pytest.raises(MessageTooLarge):
            p.send_batch([Message("T", b"y" * 1_000_000) for _ in range(5)])
        # a separator inside properties text would cut it differently on the way back
        for bad in (Message("T", b"x", properties={"u": "a\x02DELAY\x013"}), Message("T", b"x", tags="A\x01B"),
                    Message("T", b"x", keys=["k\x02"]), Message("T", b"x", properties={"": "v"})):
            with pytest.raises(InvalidMessage):
                p.send(bad)
            with pytest.raises(InvalidMessage):
                p.send_batch([Message("T", b"ok"), bad])
        with pytest.raises(InvalidMessage):
            p.send_batch([Message("T", b"x", tags="A\x02"), Message("T", b"y", tags="A\x02")])
        assert p.send(Message("T", b"still fine")).status is SendStatus.SEND_OK


def test_new_topic_is_created_through_tbw102(env):
    ns, _ = env
    with Producer("pg", ns.addr, local="auto") as p:
        r = p.send(Message("BrandNew", b"first"))
        assert r.status is SendStatus.SEND_OK
        wait_route(ns.addr, "BrandNew")  # registered: later sends take the route (and the local path)
        for i in range(20):
            assert p.send(Message("BrandNew", b"next-%d" % i)).status is SendStatus.SEND_OK
    got = sorted(m.body for m in consume_all(ns, 21, topic="BrandNew"))
    assert got == sorted([b"first"] + [b"next-%d" % i for i in range(20)])


def test_mixed_local_and_tcp_producers_and_consumers(env):
    """Local and TCP producers write to one topic at once; local and TCP consumers (two
    groups) read it; both see identical results."""
    ns, _ = env
    n = 400

    def produce(local, tag):
        with Producer(f"pg-{tag}", ns.addr, local=local) as p:
            for i in range(n):
                p.send(Message("T", b"%s-%d" % (tag.encode(), i), tags=tag, keys=[f"{tag}{i}"]))
    ts = [threading.Thread(target=produce, args=(m, t)) for m, t in (("always", "L"), ("never", "R"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    via_local = consume_all(ns, 2 * n, group="g-local", local="always")
    via_tcp = consume_all(ns, 2 * n, group="g-tcp", local="never")

    def view(msgs):
        return sorted((m.body, m.tags, tuple(m.keys), m.queue_id, m.queue_offset, m.msg_id) for m in msgs)
    assert view(via_local) == view(via_tcp)
    assert len(via_local) == 2 * n


def _shapes(tag: str) -> tuple[list[Message], list[list[Message]]]:
    singles = [Message("T", b"%s-plain" % tag.encode()),
               Message("T", b"%s-tags" % tag.encode(), tags="A"),
               Message("T", b"%s-keys" % tag.encode(), keys=["k1", "k2"]),
               Message("T", b"%s-props" % tag.encode(), tags="B", keys="k3", properties={"u": "1", "v": "x y"}),
               Message("T", b"%s-flag" % tag.encode(), flag=7),
               Message("T", b"%s-compressed" % tag.encode() + b"c" * 8000, tags="C"),  # over compress_over
               Message("T", b"%s-timer" % tag.encode(), properties={"TIMER_DELAY_SEC": "3"})]
    batches = [[Message("T", b"%s-ub%d" % (tag.encode(), i), tags="U") for i in range(5)],
               [Message("T", b"%s-mb%d" % (tag.encode(), i), tags=None if i % 2 else "M", keys=f"mk{i}",
                        properties={"i": str(i)} if i % 3 == 0 else None, flag=i) for i in range(6)]]
    return singles, batches


def test_local_fast_sends_store_what_tcp_sends(env):
    """The local hot path (properties and UNIQ_KEY assembled in C) stores the same properties,
    tags, keys and flags as a send over TCP; every result's ids match what the consumer sees."""
    ns, _ = env
    results = {}
    for local, tag in (("always", "L"), ("never", "R")):
        singles, batches = _shapes(tag)
        with Producer(f"pg-{tag}", ns.addr, local=local) as p:
            for m in singles:
                results[m.body] = p.send(m)
            for b in batches:
                r = p.send_batch(b)
                for m, mid in zip(b, r.msg_id.split(",")):
                    results[m.body] = (mid, r)
    msgs = consume_all(ns, len(results), group="cg-shapes")
    assert len(msgs) == len(results)

    def shape(m):
        # a fired timer's wheel properties carry the times it was stored and fired
        props = {k: v for k, v in m.properties.items()
                 if k != "UNIQ_KEY" and k not in ("TIMER_OUT_MS", "TIMER_ENQUEUE_MS", "TIMER_DEQUEUE_MS",
                                                    "SHMQ_TIMER_SRC")}
        return (m.body[1:], m.tags, tuple(m.keys), m.flag, tuple(sorted(props.items())))
    local = sorted(shape(m) for m in msgs if m.body.startswith(b"L"))
    remote = sorted(shape(m) for m in msgs if m.body.startswith(b"R"))
    assert local == remote and len(local) == len(results) // 2
    for m in msgs:
        r = results[m.body]
        if isinstance(r, tuple):
            mid, r = r
            assert m.msg_id == mid
        else:
            assert m.msg_id == r.msg_id
            if "TIMER_OUT_MS" not in m.properties:  # a timer's send answers its place in the wheel's topic
                assert m.offset_msg_id == r.offset_msg_id
                assert (m.queue_id, m.queue_offset) == (r.queue.queue_id, r.queue_offset)
    ids = [m.msg_id for m in msgs]
    assert len(set(ids)) == len(ids)


def test_local_send_of_a_property_the_pipeline_rewrites_takes_the_full_path(env):
    ns, _ = env
    with Producer("pg-rw", ns.addr, local="always") as p:
        p.send(Message("T", b"delayed by property", properties={"DELAY": "1"}))
        r = p.send_batch([Message("T", b"b0"), Message("T", b"b1", properties={"DELAY": "1"})])
        assert r.msg_id.count(",") == 1
    got = consume_all(ns, 3, group="cg-rw")
    assert sorted(m.body for m in got) == [b"b0", b"b1", b"delayed by property"]
    d = next(m for m in got if m.body == b"delayed by property")
    assert d.properties.get("REAL_TOPIC") == "T" and d.store_timestamp - d.born_timestamp >= 900  # level 1: 1 s


def test_local_sends_across_commitlog_and_consumequeue_files(namesrv, start_broker):
    """The hot path's C append asks for the next CommitLog / ConsumeQueue file to be mapped
    (ENEEDLOG / ENEEDCQ) and goes on: thousands of sends and batches over files of 256 KiB
    and 300-entry queues arrive whole and in queue order."""
    b = start_broker(namesrv, settings={"mappedFileSizeCommitLog": 256 * 1024, "mappedFileSizeConsumeQueue": 300 * 20})
    make_topic(b, "Roll", 2)
    wait_route(namesrv.addr, "Roll")
    body = b"r" * 1000
    with Producer("pg-roll", namesrv.addr, local="always") as p:
        sent = [p.send(Message("Roll", body + b"%05d" % i, tags="x")) for i in range(1500)]
        for j in range(20):
            p.send_batch([Message("Roll", body + b"b%02d-%02d" % (j, k)) for k in range(40)])
    assert all(r.status is SendStatus.SEND_OK for r in sent)
    assert len(list((Path(b.store) / "commitlog").iterdir())) > 5
    assert len(list((Path(b.store) / "consumequeue" / "Roll" / "0").iterdir())) > 2
    msgs = consume_all(namesrv, 1500 + 800, group="cg-roll", topic="Roll")
    assert len({m.body for m in msgs}) == 2300
    for q in (0, 1):
        offs = [m.queue_offset for m in msgs if m.queue_id == q]
        assert sorted(offs) == list(range(len(offs)))


def test_a_local_batch_that_needs_a_new_consumequeue_file_stays_on_its_queue(namesrv, start_broker):
    """A uniform local batch whose queue lacks its next ConsumeQueue file (the C append answers
    ENEEDCQ) is appended to that same queue, which makes the file: the round robin goes on in
    order and every queue's offsets are contiguous (the next queue took such a batch before, and
    the queue lacking the file went on failing until the flush service made it)."""
    b = start_broker(namesrv, settings={"mappedFileSizeConsumeQueue": 300 * 20})
    make_topic(b, "Rr", 2)
    wait_route(namesrv.addr, "Rr")
    with Producer("pg-rr", namesrv.addr, local="always") as p:
        res = [p.send_batch([Message("Rr", b"%03d-%02d" % (j, k)) for k in range(64)]) for j in range(30)]
    qids = [r.queue.queue_id for r in res]
    assert all(a != b for a, b in zip(qids, qids[1:])), qids
    for q in (0, 1):
        offs = [r.queue_offset for r in res if r.queue.queue_id == q]
        assert offs == list(range(offs[0], offs[0] + 64 * len(offs), 64))
    assert len(list((Path(b.store) / "consumequeue" / "Rr" / "0").iterdir())) >= 3
