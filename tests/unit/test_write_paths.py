"""One write path: a message is stored as the same bytes whether the broker's send processor
took it (classify, then the store's FastWriter or the full pipeline) or the put pipeline did,
for every shape of message (plain, tags, keys, user properties, flag, compressed, batch,
delayed, transactional half, retry, dead letter)."""
import time
import zlib

import pytest

from shmq.message.batch import BatchEntry, encode_batch
from shmq.message.classify import AS_SENT, classify
from shmq.message.javahash import java_string_hash
from shmq.message.layout import (FLAG_COMPRESSED, R_BORNTS, R_PHYSOFFSET, R_QUEUEOFFSET, R_STORETS,
                                 TX_PREPARED_TYPE)
from shmq.message.properties import encode_properties
from shmq.message.record import iter_records
from shmq.store import MessageStore
from shmq.store.delay_levels import DelayLevels
from shmq.store.put import PutPipeline, PutRequest

from ..conftest import small_config

LEVELS = DelayLevels.parse("1s 5s 10s")
BORN = ("10.0.0.7", 4321)
BORN_INT = (10 << 24 | 7, 4321)

SHAPES = {
    "plain": ("T", b"p", {}, 0, 0),
    "tags": ("T", b"t", {"TAGS": "A"}, 0, 0),
    "keys": ("T", b"k", {"KEYS": "k1 k2", "UNIQ_KEY": "ABC"}, 0, 0),
    "user properties": ("T", b"u", {"TAGS": "B", "u": "1", "v": "x y", "WAIT": "true"}, 0, 0),
    "flag": ("T", b"f", {"CLUSTER": "Other"}, 9, 0),
    "compressed": ("T", zlib.compress(b"z" * 10000), {"TAGS": "Z"}, 0, FLAG_COMPRESSED),
    # an absolute time, so both roads store the same TIMER_OUT_MS (a relative delay counts from each put)
    "timer": ("T", b"tm", {"TIMER_DELIVER_MS": str(int(time.time() * 1000) + 600_000)}, 0, 0),
    "delayed": ("T", b"d", {"DELAY": "2", "WAIT": "false"}, 0, 0),
    "half": ("T", b"h", {"TRAN_MSG": "true", "PGROUP": "pg"}, 0, TX_PREPARED_TYPE),
    "retry": ("%RETRY%G", b"r", {"RETRY_TOPIC": "T"}, 0, 0),
    "dead letter": ("%RETRY%G", b"dl", {"RETRY_TOPIC": "T"}, 0, 0),
}


@pytest.fixture
def roads(store_root):
    store = MessageStore.open(small_config(store_root), tag_code=LEVELS.tag_code)
    pipe = PutPipeline(store, "TestCluster", LEVELS)
    yield pipe
    store.close()


def _request(name, shape, **kw):
    topic, body, props, flag, sysflag = shape
    return PutRequest(topic, body, encode_properties(props).encode(), queue_id=1, flag=flag, sysflag=sysflag,
                      born_timestamp=1000, born_host=BORN, reconsume_times=5 if name == "dead letter" else 0,
                      max_reconsume_times=3, write_queues=4, **kw)


def _broker_road(pipe, req):
    """What the broker's send processor does with a SEND_MESSAGE (see processors/send.py)."""
    if classify(req.topic, req.properties, req.sysflag) not in AS_SENT:
        return pipe.put(req, wait_flush=False)
    fw = pipe.fast_writer(req.topic, req.queue_id)
    fw.put_sent(req.body, req.properties, req.flag, req.sysflag, req.born_timestamp, *BORN_INT, req.reconsume_times)
    return fw.out


def _last_records(pipe, n):
    """(topic, queue id, flag, sysflag, born, body, properties) of the newest n records."""
    log = pipe.store.commitlog
    mv = memoryview(log.map(0))[:pipe.store.commit_pos]
    return [(m.topic, m.queue_id, m.flag, m.sysflag, m.born_timestamp, m.born_host, m.reconsume_times,
             bytes(m.body), dict(m.properties)) for m in list(iter_records(mv))[-n:]]


def _last_record(pipe):
    return _last_records(pipe, 1)[0]


@pytest.mark.parametrize("name", SHAPES)
def test_broker_and_pipeline_store_the_same_record(roads, name):
    roads.put(_request(name, SHAPES[name]), wait_flush=False)
    by_pipeline = _last_record(roads)
    _broker_road(roads, _request(name, SHAPES[name]))
    by_broker = _last_record(roads)
    assert by_broker == by_pipeline
    props = by_broker[-1]
    assert props.get("CLUSTER") == "TestCluster" and "WAIT" not in props


def test_the_roads_are_the_classify_kinds(roads):
    kinds = {name: classify(s[0], encode_properties(s[2]), s[4]).value for name, s in SHAPES.items()}
    assert kinds == {"plain": "plain", "tags": "plain", "keys": "plain", "user properties": "plain",
                     "flag": "plain", "compressed": "plain", "timer": "timer", "delayed": "delayed",
                     "half": "half", "retry": "retry", "dead letter": "retry"}


def test_batch_same_either_way(roads):
    body = encode_batch([BatchEntry(b"b0", "TAGS\x01x", 0), BatchEntry(b"b1", "KEYS\x01k", 3)])
    text = "WAIT\x01true\x02u\x011"
    roads.put(PutRequest("T", body, text, queue_id=0, sysflag=0, born_timestamp=1000, born_host=BORN, batch=True,
                         write_queues=4), wait_flush=False)
    n = pipe_records = list(iter_records(memoryview(roads.store.commitlog.map(0))[:roads.store.commit_pos]))
    fw = roads.fast_writer("T", 0)
    fw.put_sent_batch(body, text, 0, 1000, *BORN_INT)
    both = list(iter_records(memoryview(roads.store.commitlog.map(0))[:roads.store.commit_pos]))[len(n):]

    def shape(m):
        return (m.topic, m.flag, m.born_host, bytes(m.body), m.properties)
    assert [shape(m) for m in both] == [shape(m) for m in pipe_records]
    assert both[0].properties == {"TAGS": "x", "u": "1", "CLUSTER": "TestCluster"}


def test_local_send_road_stores_the_pipeline_record_and_never_waits_holding_the_gil(roads):
    """The local producer's call (shmq_send through shmq.native.hot_send, GIL held) stores what
    the pipeline stores for a plain message; while another writer holds the append lock it
    answers SHMQ_EBUSY and stores nothing (the producer then appends through cffi, which
    releases the GIL while it waits)."""
    from shmq.client.message import SendResult, SendStatus
    from shmq.client.uniq_id import generator
    from shmq.message.msgid import offset_msg_id
    from shmq.native import ffi, hot_send, lib
    uniq = generator()
    fw = roads.fast_writer("T", 1, BORN)
    r = fw.route(uniq)
    head = b"TAGS\x01A\x02"
    before = roads.store.commit_pos
    holder = roads.store.queue_writer("T", 2)
    assert lib.shmq_lock(holder.c_writer) == 0
    try:
        assert hot_send(r.addr, b"local body", head, "the queue", b"8 bytes!") == lib.SHMQ_EBUSY
        assert roads.store.commit_pos == before
    finally:
        lib.shmq_unlock(holder.c_writer)
    got = hot_send(r.addr, b"local body", head, "the queue", b"8 bytes!")
    if isinstance(got, int):  # a fresh queue: its ConsumeQueue file is mapped first
        fw.finish_plain(got, b"local body", head, uniq, r.id_out)
        got = hot_send(r.addr, b"local body", head, "the queue", b"8 bytes!")
    assert isinstance(got, SendResult) and got.status is SendStatus.SEND_OK
    assert (got.queue, got.queue_offset, got.transaction_id, got.recall_handle) == ("the queue", r.out.queue_offset,
                                                                                  None, None)
    assert got.msg_id == ffi.unpack(r.id_out, 32).decode()
    assert got.offset_msg_id == offset_msg_id(b"8 bytes!", r.out.phys_offset)
    local = _last_record(roads)
    assert local[-1]["UNIQ_KEY"] == got.msg_id
    roads.put(PutRequest("T", b"local body", encode_properties({"TAGS": "A", "UNIQ_KEY": got.msg_id}).encode(),
                         queue_id=1, born_timestamp=local[4], born_host=BORN, write_queues=4), wait_flush=False)
    assert _last_record(roads) == local
    cq = roads.store.queues.get("T", 1)  # the same tag code (TAGS hash) in both ConsumeQueue entries
    assert cq.entry(got.queue_offset)[2] == cq.entry(got.queue_offset + 1)[2] == java_string_hash("A")


def test_local_uniform_batch_road(roads):
    """hot_send_batch (a uniform local send_batch, checked and encoded in C) stores each message
    as the C batch encoder of put_plain_batch does, with its own UNIQ_KEY and the TAGS hash in
    every ConsumeQueue entry; a list it does not take (another tag, a property, a subclass) is
    None, and a held lock is SHMQ_EBUSY, both with nothing stored."""
    from shmq.client.message import Message, SendResult
    from shmq.client.uniq_id import generator
    from shmq.native import hot_send_batch, lib
    fw = roads.fast_writer("T", 1, BORN)
    r = fw.route(generator())
    head = b"TAGS\x01A\x02"
    # bodies of different lengths: the records after the first are copies of it (core_append.c copy_direct)
    msgs = [Message("T", b"b%d" % k * (1 + 7 * k), tags="A") for k in range(5)]
    before = roads.store.commit_pos

    class Sub(Message):
        __slots__ = ()
    for bad in ([*msgs[:4], Message("T", b"x", tags="B")], [*msgs[:4], Message("T", b"x", tags="A", keys="k")],
                [*msgs[:4], Sub("T", b"x", tags="A")], [*msgs[:4], Message("T", b"", tags="A")]):
        assert hot_send_batch(r.addr, bad, head, 4096, "q", b"8 bytes!") is None
    holder = roads.store.queue_writer("T", 2)
    assert lib.shmq_lock(holder.c_writer) == 0
    try:
        assert hot_send_batch(r.addr, msgs, head, 4096, "q", b"8 bytes!") == lib.SHMQ_EBUSY
    finally:
        lib.shmq_unlock(holder.c_writer)
    assert roads.store.commit_pos == before
    got = hot_send_batch(r.addr, msgs, head, 4096, "q", b"8 bytes!")
    if isinstance(got, int):  # a fresh queue: its ConsumeQueue file is mapped first
        fw.put_sent(b"warm", b"", 0, 0, 1000, *BORN_INT, 0)
        got = hot_send_batch(r.addr, msgs, head, 4096, "q", b"8 bytes!")
    assert isinstance(got, SendResult) and got.queue == "q"
    ids = got.msg_id.split(",")
    mv = memoryview(roads.store.commitlog.map(0))[:roads.store.commit_pos]
    stored = list(iter_records(mv))[-5:]
    assert [bytes(m.body) for m in stored] == [m.body for m in msgs]
    assert [dict(m.properties) for m in stored] == [{"TAGS": "A", "UNIQ_KEY": i, "CLUSTER": "TestCluster"} for i in ids]
    assert [m.queue_offset for m in stored] == list(range(got.queue_offset, got.queue_offset + 5))
    cq = roads.store.queues.get("T", 1)
    assert {cq.entry(m.queue_offset)[2] for m in stored} == {java_string_hash("A")}
    # the same bodies through the encoded batch (shmq_put_local_batch): the same bytes but for the
    # offsets, times and ids, which differ by design
    from shmq.native import ffi
    bodies = [m.body for m in msgs]
    ids_out = ffi.new("char[]", 32 * 5)
    fw.put_plain_batch(b"".join(bodies), [len(b) for b in bodies], head, ffi.NULL, ffi.NULL, 5, 4096, generator(),
                       ids_out)
    mv = memoryview(roads.store.commitlog.map(0))[:roads.store.commit_pos]
    again = list(iter_records(mv))[-5:]

    def same_bytes(m):
        raw = bytearray(mv[m.phys_offset:m.phys_offset + m.size])
        for off in (R_QUEUEOFFSET, R_PHYSOFFSET, R_BORNTS, R_STORETS):
            raw[off:off + 8] = bytes(8)
        at = raw.index(b"UNIQ_KEY\x01") + 9
        raw[at:at + 32] = bytes(32)
        return bytes(raw)
    assert [same_bytes(m) for m in again] == [same_bytes(m) for m in stored]


def test_local_message_road_builds_the_tags_head_and_refuses_the_rest(roads):
    """hot_send_message (a local send() of a message with a body and maybe tags) stores the
    record hot_send stores with the head the Python path builds; any other message is None
    with nothing stored (the Python checks then decide)."""
    from shmq.client.message import Message, SendResult
    from shmq.client.uniq_id import generator
    from shmq.native import hot_send, hot_send_message
    fw = roads.fast_writer("T", 1, BORN)
    r = fw.route(generator())
    fw.put_sent(b"warm", b"", 0, 0, 1000, *BORN_INT, 0)  # the queue's ConsumeQueue file is mapped

    class Sub(Message):
        __slots__ = ()
    before = roads.store.commit_pos
    for bad in (Message("T", b"x", keys="k"), Message("T", b"x", properties={"a": "b"}), Sub("T", b"x"),
                Message("T", b"x", tags="a\x01b"), Message("T", b""), Message("T", b"x" * 5000),
                Message("T", b"x", delay_level=2), Message("T", b"x", flag=1)):
        assert hot_send_message(r.addr, bad, 4096, "q", b"8 bytes!") is None
    assert roads.store.commit_pos == before
    got = hot_send_message(r.addr, Message("T", b"tagged", tags="TagA"), 4096, "q", b"8 bytes!")
    assert isinstance(got, SendResult)
    by_message = _last_record(roads)
    assert by_message[-1] == {"TAGS": "TagA", "UNIQ_KEY": got.msg_id, "CLUSTER": "TestCluster"}
    plain = hot_send_message(r.addr, Message("T", b"untagged"), 4096, "q", b"8 bytes!")
    assert _last_record(roads)[-1] == {"UNIQ_KEY": plain.msg_id, "CLUSTER": "TestCluster"}
    again = hot_send(r.addr, b"tagged", b"TAGS\x01TagA\x02", "q", b"8 bytes!")
    last = _last_record(roads)  # the same record but for the born time (ms) and the id
    assert last[:4] + last[5:-1] == by_message[:4] + by_message[5:-1] and last[-1]["UNIQ_KEY"] == again.msg_id


def test_local_send_object_is_the_python_send_for_the_common_message(roads):
    """LocalSend (hot_send.c: Producer.send's one C call) takes the thread's _LocalTopic, advances
    its round robin and appends what hot_send_message appends; it answers None with nothing
    stored and the round robin where it was whenever LocalSender must decide: another
    thread's map not made yet, a changed route, a SYNC_FLUSH writer, a held lock, a message it
    does not take. ``batch`` does the same for a uniform send_batch."""
    import threading

    from shmq.client.local_send import _LocalTopic, _Route
    from shmq.client.message import Message, SendResult
    from shmq.client.uniq_id import generator
    from shmq.native import LocalSend, lib
    uniq = generator()
    writers = []
    for q in (1, 2):
        fw = roads.fast_writer("T", q, BORN)
        r = fw.route(uniq)
        fw.put_sent(b"warm", b"", 0, 0, 1000, *BORN_INT, 0)  # the queue's ConsumeQueue file is mapped
        writers.append(_Route(f"mq{q}", fw, r.addr, False, r))
    info = object()
    publish = {"T": info}
    t = _LocalTopic(info, publish, "a link", writers, b"8 bytes!")
    tls = threading.local()
    hot = LocalSend(tls, 4096)
    first = {"T": t}
    hot.own(threading.get_ident(), first)
    got = [hot(Message("T", b"m%d" % k, tags="A")) for k in range(4)]
    assert all(isinstance(g, SendResult) for g in got)
    assert [g.queue for g in got] == ["mq2", "mq1", "mq2", "mq1"] and t.i == 0
    assert _last_record(roads)[-1] == {"TAGS": "A", "UNIQ_KEY": got[-1].msg_id, "CLUSTER": "TestCluster"}
    before = roads.store.commit_pos

    def refused(m=None):
        assert hot(m or Message("T", b"x")) is None
        assert roads.store.commit_pos == before and t.i == 0
    for m in (Message("T", b"x", keys="k"), Message("T", b"x" * 5000), Message("U", b"x")):
        refused(m)
    publish["T"] = object()      # the route changed
    refused()
    publish["T"] = info
    first["T"] = _LocalTopic(info, publish, None, writers, b"8 bytes!")  # replaced: no link now
    refused()
    first["T"] = t
    t.info = object()            # rebuilt in place for another route
    refused()
    t.info = info
    writers[1] = writers[1]._replace(sync=True)
    refused()
    writers[1] = writers[1]._replace(sync=False)
    holder = roads.store.queue_writer("T", 3)
    assert lib.shmq_lock(holder.c_writer) == 0
    try:
        refused()
    finally:
        lib.shmq_unlock(holder.c_writer)
    hot.limit = 0                # Producer.compress_over lowered
    refused()
    hot.limit = 4096
    seen = []
    other = threading.Thread(target=lambda: seen.append(hot(Message("T", b"x"))))
    other.start()
    other.join()
    # a second thread's own map (here: the same entry)
    other = threading.Thread(target=lambda: (setattr(tls, "topics", {"T": t}), seen.append(hot(Message("T", b"o")))))
    other.start()
    other.join()
    assert seen[0] is None and isinstance(seen[1], SendResult) and seen[1].queue == "mq2"
    # batch: the uniform batch on the same round robin (t.i moved to 1 by the other thread)
    msgs = [Message("T", b"b%d" % k, tags="B") for k in range(3)]
    for bad in ([*msgs, Message("T", b"x", tags="C")], [*msgs, Message("T", b"x", keys="k")], [], (msgs[0],)):
        assert hot.batch(bad) is None
    before = roads.store.commit_pos
    publish["T"] = object()
    assert hot.batch(msgs) is None and roads.store.commit_pos == before
    publish["T"] = info
    got = hot.batch(msgs)
    assert isinstance(got, SendResult) and got.queue == "mq1" and t.i == 0 and got.msg_id.count(",") == 2
    assert [r[-2] for r in _last_records(roads, 3)] == [b"b0", b"b1", b"b2"]
    assert _last_record(roads)[-1] == {"TAGS": "B", "UNIQ_KEY": got.msg_id.split(",")[-1], "CLUSTER": "TestCluster"}


def test_local_send_follows_writers_and_round_robin_changed_in_python(roads):
    """LocalSend keeps each queue index's writer tuple and route as C values (hot_send.c, ls_wslot)
    and reads the round robin's int without a conversion: a writer tuple replaced in the list (the
    same index, another queue's route), a t.i set by the Python path, a writers list of another
    length (a rebuilt entry) and a second topic's entry sharing the indexes are each followed, so
    every record goes to the queue its writer's route names."""
    import threading

    from shmq.client.local_send import _LocalTopic, _Route
    from shmq.client.message import Message
    from shmq.client.uniq_id import generator
    from shmq.native import LocalSend
    uniq = generator()

    def writer(topic, q):
        fw = roads.fast_writer(topic, q, BORN)
        r = fw.route(uniq)
        fw.put_sent(b"warm", b"", 0, 0, 1000, *BORN_INT, 0)
        return _Route(f"{topic}{q}", fw, r.addr, False, r)
    info, publish = object(), {}
    publish["T"] = publish["U"] = info
    t = _LocalTopic(info, publish, "a link", [writer("T", 0), writer("T", 1)], b"8 bytes!")
    u = _LocalTopic(info, publish, "a link", [writer("U", 0), writer("U", 1), writer("U", 2)], b"8 bytes!")
    hot = LocalSend(threading.local(), 4096)
    hot.own(threading.get_ident(), {"T": t, "U": u})

    def sent(topic):
        res = hot(Message(topic, b"x"))
        rec = _last_record(roads)
        assert res.queue == f"{rec[0]}{rec[1]}"   # the answer names the queue the record went to
        return res.queue
    assert [sent("T") for _ in range(3)] == ["T1", "T0", "T1"]
    assert [sent("U"), sent("T"), sent("U")] == ["U1", "T0", "U2"]   # two topics, the same indexes
    t.writers[1] = writer("T", 5)                                     # replaced in place
    assert [sent("T"), sent("T")] == ["T5", "T0"]
    t.i = 0                                                           # the Python path moved it
    assert sent("T") == "T5"
    t.i = 1
    assert sent("T") == "T0"
    t.writers = [writer("T", 7)]                                      # another list, one queue
    t.n = 1
    assert [sent("T"), sent("T")] == ["T7", "T7"] and t.i == 0
    big = t.i = 10 ** 20                                              # no small int: refused, kept
    assert hot(Message("T", b"x")) is None and t.i == big


def test_local_uniform_batches_across_consume_queue_files(roads):
    """Direct batches of 64 (their records after the first copied from it, core_append.c copy_direct)
    across 100-entry ConsumeQueue files and 64 KiB CommitLog files: every record decodes with its
    own body, a body CRC equal to zlib.crc32's (RocketMQ's BODYCRC, 31 bits) and consecutive queue
    offsets, and every ConsumeQueue entry points at its record with the TAGS hash."""
    from shmq.client.message import Message, SendResult
    from shmq.client.uniq_id import generator
    from shmq.message.layout import R_BODYCRC
    from shmq.native import hot_send_batch
    fw = roads.fast_writer("T", 1, BORN)
    r = fw.route(generator())
    fw.put_sent(b"warm", b"", 0, 0, 1000, *BORN_INT, 0)
    head, sent = b"TAGS\x01A\x02", []
    for n in range(6):
        msgs = [Message("T", bytes([65 + k % 26]) * (1 + (n * 64 + k) % 97), tags="A") for k in range(64)]
        while isinstance(got := hot_send_batch(r.addr, msgs, head, 4096, "q", b"8 bytes!"), int):
            roads.store.appender.recover(got, 0)  # a file to map (CommitLog or ConsumeQueue): as LocalSender does
        assert isinstance(got, SendResult)
        sent += [(got.queue_offset + k, m.body, i) for k, (m, i) in enumerate(zip(msgs, got.msg_id.split(",")))]
    cq = roads.store.queues.get("T", 1)
    for qoff, body, uniq in sent:
        phys, size, tag = cq.entry(qoff)
        raw = bytes(roads.store.commitlog.view(phys, size))
        (m,) = list(iter_records(raw))
        assert (m.queue_offset, m.phys_offset, bytes(m.body), tag) == (qoff, phys, body, java_string_hash("A"))
        assert m.properties["UNIQ_KEY"] == uniq
        assert int.from_bytes(raw[R_BODYCRC:R_BODYCRC + 4], "big") == zlib.crc32(body) & 0x7FFFFFFF
