"""CONSUMER_SEND_MSG_BACK: each send-back stores a copy in %RETRY%<group> (through
SCHEDULE_TOPIC_XXXX at level 3 + reconsume times) with reconsume times + 1, RETRY_TOPIC and
ORIGIN_MESSAGE_ID; the max-th goes to %DLQ%<group> queue 0 without delay."""
import time

import pytest

from shmq.broker.worker.retry import send_back
from shmq.broker.supervisor.schedule import ScheduleService
from shmq.errors import ShmqError
from shmq.message.names import SCHEDULE_TOPIC
from shmq.message.record import decode_record
from shmq.store import MessageStore
from shmq.store.delay_levels import DelayLevels
from shmq.store.put import PutPipeline, PutRequest

from ..conftest import small_config

# 18 short levels, so a retry chain is delivered in well under a second
LEVELS = DelayLevels.parse(" ".join(f"{10 * i}ms" for i in range(1, 19)))


@pytest.fixture
def pipe(store_root):
    s = MessageStore.open(small_config(store_root), tag_code=LEVELS.tag_code)
    announced = []
    p = PutPipeline(s, "C", LEVELS, on_new_topic=lambda t, n: announced.append((t, n)))
    p.announced = announced
    yield p
    s.close()


def at(p, offset):
    return decode_record(p.store.read_at(offset), copy=True)


def consume(p, topic, offset, timeout=15.0):
    """The record at ``offset`` of topic's queue 0, waiting for it."""
    deadline = time.monotonic() + timeout
    while True:
        got = p.store.get_messages(topic, 0, offset, max_count=1)
        if got.messages:
            return decode_record(got.messages[0], copy=True)
        assert time.monotonic() < deadline, f"nothing at {topic}/0 offset {offset}"
        p.store.wait(p.store.commit_pos, 0.05)


def test_three_send_backs_then_dead_letter(pipe):
    svc = ScheduleService(pipe.store, pipe, LEVELS, poll_interval=0.01)
    svc.start()
    try:
        orig = pipe.put(PutRequest("Orders", b"pay me", {"TAGS": "t", "KEYS": "o-1", "UNIQ_KEY": "U1"},
                                   queue_id=2, flag=5, born_timestamp=777))
        orig_id = orig.msg_id
        offset = orig.phys_offset
        for n in (1, 2, 3):
            r = send_back(pipe, offset, "G", 0, origin_msg_id="ignored", origin_topic="Orders",
                          max_reconsume_times=3)
            assert (r.topic, r.queue_id, r.reconsume_times, r.delay_level, r.dead) == ("%RETRY%G", 0, n, 2 + n, False)
            sched = at(pipe, r.put.phys_offset)  # waits in SCHEDULE_TOPIC_XXXX at level 3, 4, 5
            assert (sched.topic, sched.queue_id, sched.properties["DELAY"]) == (SCHEDULE_TOPIC, 1 + n, str(2 + n))
            m = consume(pipe, "%RETRY%G", n - 1)
            assert (bytes(m.body), m.reconsume_times, m.flag, m.born_timestamp) == (b"pay me", n, 5, 777)
            assert m.properties["RETRY_TOPIC"] == "Orders" and m.properties["ORIGIN_MESSAGE_ID"] == orig_id
            assert m.properties["TAGS"] == "t" and m.properties["UNIQ_KEY"] == "U1" and "DELAY" not in m.properties
            offset = m.phys_offset
        # reconsume times 3 = max: a dead letter, at once
        r = send_back(pipe, offset, "G", 0, max_reconsume_times=3)
        assert (r.topic, r.queue_id, r.reconsume_times, r.delay_level, r.dead) == ("%DLQ%G", 0, 4, 0, True)
        d = at(pipe, r.put.phys_offset)
        assert (d.topic, d.queue_id, d.reconsume_times) == ("%DLQ%G", 0, 4)
        assert "DELAY" not in d.properties and d.properties["RETRY_TOPIC"] == "Orders"
        assert d.properties["ORIGIN_MESSAGE_ID"] == orig_id
        assert pipe.announced[-1] == ("%DLQ%G", 1) and ("%RETRY%G", 1) in pipe.announced
    finally:
        svc.stop()


def test_default_max_is_sixteen(pipe):
    r = pipe.put(PutRequest("%RETRY%G", b"x", queue_id=0, reconsume_times=15, client=False))
    assert send_back(pipe, r.phys_offset, "G").topic == "%RETRY%G"
    r = pipe.put(PutRequest("%RETRY%G", b"x", queue_id=0, reconsume_times=16, client=False))
    assert send_back(pipe, r.phys_offset, "G").dead


def test_request_delay_level_and_clamp(pipe):
    r = pipe.put(PutRequest("T", b"x", queue_id=0))
    assert send_back(pipe, r.phys_offset, "G", 1).delay_level == 1
    assert send_back(pipe, r.phys_offset, "G", 40).delay_level == 18
    # 3 + reconsume times beyond the last level is clamped as well
    r = pipe.put(PutRequest("T", b"x", queue_id=0, reconsume_times=30))
    assert send_back(pipe, r.phys_offset, "G", 0, max_reconsume_times=50).delay_level == 18


def test_negative_delay_level_goes_to_dlq(pipe):
    r = pipe.put(PutRequest("T", b"x", {"DELAY": "2"}, queue_id=0, client=False))
    res = send_back(pipe, r.phys_offset, "G", -1)
    assert res.dead and res.put.stored_topic == "%DLQ%G" and "DELAY" not in at(pipe, res.put.phys_offset).properties


def test_retry_topic_kept_when_set(pipe):
    r = pipe.put(PutRequest("%RETRY%G", b"x", {"RETRY_TOPIC": "First", "ORIGIN_MESSAGE_ID": "OID"},
                            queue_id=0, reconsume_times=1))
    m = at(pipe, send_back(pipe, r.phys_offset, "G").put.phys_offset)
    assert m.properties["RETRY_TOPIC"] == "First" and m.properties["ORIGIN_MESSAGE_ID"] == "OID"
    assert m.properties["REAL_TOPIC"] == "%RETRY%G" and m.reconsume_times == 2


@pytest.mark.parametrize("offset", [-1, 10**9, 3])
def test_no_record_at_offset(pipe, offset):
    pipe.put(PutRequest("T", b"some body", queue_id=0))
    with pytest.raises(ShmqError) as e:
        send_back(pipe, offset, "G")
    assert e.value.code == 1 and f"look message by offset failed, {offset}" in str(e.value)


def test_processor_answer(pipe):
    from shmq.broker.worker.retry import answer_send_back, max_reconsume_times_of
    assert max_reconsume_times_of(121, 3) == 3 and max_reconsume_times_of(120, 3) == 16
    assert max_reconsume_times_of(400, None, 5) == 5
    r = pipe.put(PutRequest("T", b"x", queue_id=0, reconsume_times=3))
    assert answer_send_back(pipe, r.phys_offset, "G", 0, 3, 401) == (0, None)
    assert pipe.store.max_offset("%DLQ%G", 0) == 1                       # header max honoured
    assert answer_send_back(pipe, r.phys_offset, "G", 0, 3, 100) == (0, None)
    assert pipe.store.max_offset(SCHEDULE_TOPIC, 5) == 1                 # old client: 16, level 6
    assert answer_send_back(pipe, r.phys_offset, "G", 0, None, 401, retry_queue_nums=0) == (0, None)
    code, remark = answer_send_back(pipe, 12345678, "G", 0, None, 401)
    assert code == 1 and remark == "look message by offset failed, 12345678"
