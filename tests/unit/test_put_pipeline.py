"""The put pipeline shared by broker and local producers: send checks, queue choice, WAIT and
CLUSTER, retry -> DLQ, half messages, delay to SCHEDULE_TOPIC_XXXX (clamped), batches, the
delay-level parser and the recovery tag code."""
import os

import pytest

from shmq.errors import InvalidMessage, InvalidTopic, MessageTooLarge, ShmqError
from shmq.message.batch import encode_batch
from shmq.message.layout import TX_PREPARED_TYPE, TX_TYPE_MASK
from shmq.message.names import HALF_TOPIC
from shmq.message.properties import properties_bytes
from shmq.message.record import decode_record
from shmq.native import lib
from shmq.store import MessageStore
from shmq.message.names import SCHEDULE_TOPIC
from shmq.store.delay_levels import DEFAULT_LEVELS, DelayLevels
from shmq.store.put import PutPipeline, PutRequest, tag_code
from shmq.store.validate import SYSTEM_TOPICS

from ..conftest import small_config

LEVELS = DelayLevels.parse("1s 5s 10s")


@pytest.fixture
def stores(store_root):
    """stores(levels, **cfg) -> an owner store whose recovery uses ``levels``' tag code."""
    opened = []

    def _open(levels=LEVELS, **kw):
        s = MessageStore.open(small_config(store_root, **kw), tag_code=levels.tag_code)
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


@pytest.fixture
def pipe(stores):
    announced = []
    p = PutPipeline(stores(), "TestCluster", LEVELS, on_new_topic=lambda t, n: announced.append((t, n)))
    p.announced = announced
    return p


def stored(p, r):
    return decode_record(p.store.read_at(r.phys_offset))


# ---- delay levels ------------------------------------------------------------------------
class TestDelayLevels:
    def test_default_levels(self):
        assert DEFAULT_LEVELS.max_level == 18
        assert [DEFAULT_LEVELS.delay_ms(i) for i in (1, 2, 3, 4, 5, 17, 18)] == [
            1000, 5000, 10000, 30000, 60000, 3_600_000, 7_200_000]

    def test_units_and_ms(self):
        lv = DelayLevels.parse("200ms 400ms 1s 2m 1h 1d")
        assert list(lv) == [(1, 200), (2, 400), (3, 1000), (4, 120_000), (5, 3_600_000), (6, 86_400_000)]
        assert DelayLevels.parse("  1s\t5s  ").max_level == 2

    def test_clamp(self):
        assert LEVELS.clamp(99) == 3 and LEVELS.delay_ms(99) == 10_000
        with pytest.raises(ValueError):
            LEVELS.clamp(0)

    @pytest.mark.parametrize("text", ["", "1x", "s", "1s 5", "-1s", "1 s"])
    def test_bad_text_refused(self, text):
        with pytest.raises(ValueError):
            DelayLevels.parse(text)


# ---- WAIT, CLUSTER, properties -------------------------------------------------------------
class TestPlainSend:
    @pytest.mark.parametrize("props", [
        b"TAGS\x01a\x02WAIT\x01true\x02KEYS\x01k1 k2",       # Java: no trailing \2
        b"WAIT\x01true\x02TAGS\x01a\x02KEYS\x01k1 k2\x02",    # ali-ons/C++: trailing \2
        "TAGS\x01a\x02KEYS\x01k1 k2\x02WAIT\x01false",        # str, from a remoting header
        {"TAGS": "a", "KEYS": "k1 k2", "WAIT": "true"},
        b"TAGS\x01a\x02CLUSTER\x01Other\x02KEYS\x01k1 k2",    # a client's CLUSTER is replaced
    ])
    def test_wait_dropped_cluster_added(self, pipe, props):
        r = pipe.put(PutRequest("Orders", b"body", props, queue_id=2, write_queues=4))
        m = stored(pipe, r)
        assert (m.topic, m.queue_id, bytes(m.body)) == ("Orders", 2, b"body")
        assert m.properties == {"TAGS": "a", "KEYS": "k1 k2", "CLUSTER": "TestCluster"}
        assert (r.topic, r.queue_id, r.request_queue_id, r.delay_level, r.half) == ("Orders", 2, 2, 0, False)
        assert r.stored_topic == "Orders" and r.msg_id == m.offset_msg_id
        # the ConsumeQueue tag code is the TAGS hash
        assert pipe.store.queues.get("Orders", 2).entry(r.queue_offset)[2] == lib.shmq_tag_code_of_props(b"TAGS\x01a", 6)

    def test_header_fields_kept(self, pipe):
        r = pipe.put(PutRequest("T", b"x", b"", queue_id=0, flag=7, sysflag=0, born_timestamp=1234,
                                born_host=("10.1.2.3", 555), reconsume_times=2))
        m = stored(pipe, r)
        assert (m.flag, m.born_timestamp, m.born_host, m.reconsume_times) == (7, 1234, ("10.1.2.3", 555), 2)
        assert m.properties == {"CLUSTER": "TestCluster"}

    def test_bad_properties_refused(self, pipe):
        with pytest.raises(InvalidMessage):
            pipe.put(PutRequest("T", b"x", {"A": "b\x02c"}, queue_id=0))
        with pytest.raises(InvalidMessage):
            pipe.put(PutRequest("T", b"x", b"A\x01\xff\xfe", queue_id=0))
        with pytest.raises(InvalidMessage):
            pipe.put(PutRequest("T", b"x", {"DELAY": "soon"}, queue_id=0))
        assert pipe.store.commit_pos == 0

    @pytest.mark.parametrize("topic", sorted(SYSTEM_TOPICS))
    def test_system_topics_refused_for_clients(self, pipe, topic):
        with pytest.raises(InvalidTopic) as e:
            pipe.put(PutRequest(topic, b"x", queue_id=0))
        assert e.value.code == 13
        pipe.put(PutRequest(topic, b"x", queue_id=0, client=False))  # the broker's own services may

    @pytest.mark.parametrize("topic", ["", "a b", "x" * 128, "t/1"])
    def test_invalid_topic(self, pipe, topic):
        with pytest.raises(InvalidTopic):
            pipe.put(PutRequest(topic, b"x", queue_id=0))

    def test_body_over_max_message_size(self, pipe):
        with pytest.raises(MessageTooLarge) as e:
            pipe.put(PutRequest("T", b"x" * (16 * 1024 + 1), queue_id=0))
        assert e.value.code == 13 and pipe.store.commit_pos == 0

    def test_queue_choice(self, pipe):
        seen = {pipe.put(PutRequest("T", b"x", write_queues=4)).queue_id for _ in range(64)}
        assert seen <= {0, 1, 2, 3} and len(seen) > 1
        with pytest.raises(ShmqError) as e:
            pipe.put(PutRequest("T", b"x", queue_id=4, write_queues=4, read_queues=4))
        assert e.value.code == 1 and "queueId[4] is illegal" in str(e.value)
        pipe.put(PutRequest("T", b"x", queue_id=5, write_queues=4, read_queues=8))  # max(read, write)
        with pytest.raises(ShmqError) as e:
            pipe.put(PutRequest("T", b"x", queue_id=-1))
        assert e.value.code == 1


# ---- delay ---------------------------------------------------------------------------------
class TestDelay:
    def test_delayed_message_goes_to_schedule_topic(self, pipe):
        r = pipe.put(PutRequest("Orders", b"later", {"TAGS": "a", "DELAY": "2", "WAIT": "true"},
                                queue_id=3, write_queues=4, born_timestamp=99))
        assert (r.stored_topic, r.stored_queue_id) == (SCHEDULE_TOPIC, 1)
        assert (r.topic, r.queue_id, r.request_queue_id, r.delay_level) == ("Orders", 3, 3, 2)
        m = stored(pipe, r)
        assert m.properties == {"TAGS": "a", "DELAY": "2", "CLUSTER": "TestCluster",
                                "REAL_TOPIC": "Orders", "REAL_QID": "3"}
        assert bytes(m.body) == b"later" and m.born_timestamp == 99
        phys, _, due = pipe.store.queues.get(SCHEDULE_TOPIC, 1).entry(r.queue_offset)
        assert phys == r.phys_offset and due == m.store_timestamp + 5000
        assert pipe.store.queue_bounds("Orders", 3) is None  # nothing in the real queue yet

    def test_level_above_max_is_clamped(self, pipe):
        r = pipe.put(PutRequest("T", b"x", {"DELAY": "40"}, queue_id=0))
        m = stored(pipe, r)
        assert (m.topic, m.queue_id, m.properties["DELAY"], r.delay_level) == (SCHEDULE_TOPIC, 2, "3", 3)
        assert pipe.store.queues.get(SCHEDULE_TOPIC, 2).entry(0)[2] == m.store_timestamp + 10_000

    @pytest.mark.parametrize("delay", ["0", "-3"])
    def test_no_delay_for_level_zero_or_less(self, pipe, delay):
        r = pipe.put(PutRequest("T", b"x", {"DELAY": delay}, queue_id=0))
        assert r.stored_topic == "T" and r.delay_level == 0

    def test_put_inner_applies_delay_for_services(self, pipe):
        r = pipe.put_inner("%RETRY%G", 0, b"x", {"DELAY": "1", "RETRY_TOPIC": "T"}, reconsume_times=1)
        m = stored(pipe, r)
        assert (m.topic, m.queue_id, m.reconsume_times) == (SCHEDULE_TOPIC, 0, 1)
        assert m.properties["REAL_TOPIC"] == "%RETRY%G" and "CLUSTER" not in m.properties


# ---- retry -> DLQ --------------------------------------------------------------------------
class TestRetryToDLQ:
    def test_max_reconsume_times_reached(self, pipe):
        r = pipe.put(PutRequest("%RETRY%G1", b"x", {"DELAY": "3", "TAGS": "t"}, queue_id=0,
                                write_queues=1, reconsume_times=16))
        m = stored(pipe, r)
        assert (m.topic, m.queue_id, r.topic) == ("%DLQ%G1", 0, "%DLQ%G1")
        assert "DELAY" not in m.properties and m.reconsume_times == 16
        assert pipe.announced == [("%DLQ%G1", 1)]

    def test_below_max_stays_in_retry(self, pipe):
        r = pipe.put(PutRequest("%RETRY%G1", b"x", b"", queue_id=0, write_queues=1, reconsume_times=15))
        assert r.stored_topic == "%RETRY%G1" and not pipe.announced

    def test_request_max_reconsume_times(self, pipe):
        r = pipe.put(PutRequest("%RETRY%G1", b"x", queue_id=0, reconsume_times=2, max_reconsume_times=2))
        assert r.stored_topic == "%DLQ%G1"
        r = pipe.put(PutRequest("Normal", b"x", queue_id=0, reconsume_times=99, max_reconsume_times=2))
        assert r.stored_topic == "Normal"  # only %RETRY% topics are checked


# ---- transactions ---------------------------------------------------------------------------
class TestHalfMessage:
    def test_half_message_rewrite(self, pipe):
        r = pipe.put(PutRequest("Pay", b"tx", {"TRAN_MSG": "true", "DELAY": "1", "UNIQ_KEY": "U1"},
                                queue_id=1, write_queues=4, sysflag=TX_PREPARED_TYPE, producer_group="PG"))
        m = stored(pipe, r)
        assert (m.topic, m.queue_id, r.half, r.topic, r.queue_id) == (HALF_TOPIC, 0, True, "Pay", 1)
        assert m.sysflag & TX_TYPE_MASK == 0
        assert m.properties["REAL_TOPIC"] == "Pay" and m.properties["REAL_QID"] == "1"
        assert m.properties["PGROUP"] == "PG" and m.properties["TRAN_MSG"] == "true"
        assert m.properties["DELAY"] == "1"  # kept for the commit, not applied to the half
        # cleared type bits: the half message has a ConsumeQueue entry for the check-back scan
        assert pipe.store.queue_bounds(HALF_TOPIC, 0) == (0, 1)

    def test_tran_msg_false_is_a_normal_send(self, pipe):
        assert pipe.put(PutRequest("Pay", b"x", {"TRAN_MSG": "false"}, queue_id=0)).stored_topic == "Pay"


# ---- batches -------------------------------------------------------------------------------
class TestBatch:
    def batch(self, n=3):
        return encode_batch([(b"b%d" % i, properties_bytes({"KEYS": f"k{i}"}), i) for i in range(n)])

    def test_batch_entries_get_cluster(self, pipe):
        r = pipe.put(PutRequest("B", self.batch(), {"WAIT": "true"}, queue_id=1, batch=True))
        assert (r.count, r.queue_offset, r.stored_topic) == (3, 0, "B")
        got = pipe.store.get_messages("B", 1, 0)
        ms = [decode_record(x) for x in got.messages]
        assert [bytes(m.body) for m in ms] == [b"b0", b"b1", b"b2"] and [m.flag for m in ms] == [0, 1, 2]
        assert [m.properties for m in ms] == [{"KEYS": f"k{i}", "CLUSTER": "TestCluster"} for i in range(3)]

    @pytest.mark.parametrize("props,sysflag", [({"DELAY": "1"}, 0), ({}, TX_PREPARED_TYPE),
                                               ({"TRAN_MSG": "true"}, 0)])
    def test_batch_delay_or_transaction_refused(self, pipe, props, sysflag):
        with pytest.raises(InvalidMessage) as e:
            pipe.put_batch(PutRequest("B", self.batch(), props, queue_id=0, sysflag=sysflag))
        assert e.value.code == 13 and pipe.store.commit_pos == 0

    def test_batch_to_system_topic_refused(self, pipe):
        with pytest.raises(InvalidTopic):
            pipe.put_batch(PutRequest(SCHEDULE_TOPIC, self.batch(), queue_id=0))


# ---- tag code for recovery ---------------------------------------------------------------
def test_tag_code_function():
    props = b"TAGS\x01created\x02DELAY\x012"
    assert tag_code("T", props, 1000) == lib.shmq_tag_code_of_props(props, len(props))
    assert tag_code(SCHEDULE_TOPIC, props, 1000) == 1000 + 5000
    assert tag_code(SCHEDULE_TOPIC, b"DELAY\x0199", 1000) == 1000 + 7_200_000  # clamped
    assert tag_code(SCHEDULE_TOPIC, b"TAGS\x01x", 1000) == 2000  # no DELAY: one second
    assert LEVELS.tag_code(SCHEDULE_TOPIC, props, 1000) == 6000


def test_recovery_rebuilds_due_times(stores, store_root):
    s = stores()
    p = PutPipeline(s, "C", LEVELS)
    rs = [p.put(PutRequest("T", b"x%d" % i, {"DELAY": str(1 + i % 3)}, queue_id=0)) for i in range(6)]
    s.close()
    # lose the ConsumeQueues and the checkpoint: recovery rebuilds every entry from the log
    import shutil
    shutil.rmtree(os.path.join(str(store_root), "consumequeue"))
    os.unlink(os.path.join(str(store_root), "checkpoint"))
    s = stores()
    for r in rs:
        m = decode_record(s.read_at(r.phys_offset))
        e = s.queues.get(SCHEDULE_TOPIC, m.queue_id).entry(m.queue_offset)
        assert e == (r.phys_offset, r.size, m.store_timestamp + LEVELS.delay_ms(int(m.properties["DELAY"])))
