"""The Store API: put/get, RocketMQ's getMessage statuses, rolling over tiny files, batches,
offsets by time, consumer offsets, and bad input that must leave the store untouched."""
import os
import time

import pytest

from shmq.errors import InvalidMessage, InvalidTopic, MessageTooLarge, StoreClosed, StoreLocked
from shmq.message.batch import encode_batch
from shmq.message.record import decode_record
from shmq.native import lib
from shmq.store import GetStatus, MessageStore
from shmq.store.verify import verify_store

from ..conftest import small_config


def bodies(res):
    return [bytes(decode_record(m).body) for m in res.messages]


def test_put_and_get(open_store):
    s = open_store()
    for i in range(10):
        r = s.put("Orders", 1, b"m%d" % i, {"TAGS": "created" if i % 2 else "paid", "KEYS": f"o-{i}"})
        assert (r.queue_id, r.queue_offset) == (1, i)
    got = s.get_messages("Orders", 1, 0, max_count=32)
    assert got.status is GetStatus.FOUND
    assert bodies(got) == [b"m%d" % i for i in range(10)]
    assert got.next_begin_offset == 10 and (got.min_offset, got.max_offset) == (0, 10)
    m = decode_record(got.messages[3])
    assert m.tags == "created" and m.keys == ["o-3"] and m.queue_offset == 3


def test_get_statuses_follow_rocketmq(open_store):
    s = open_store()
    assert s.get_messages("Nope", 0, 0).status is GetStatus.NO_MATCHED_LOGIC_QUEUE
    for i in range(5):
        s.put("T", 0, b"x")
    assert s.get_messages("T", 0, 5).status is GetStatus.OFFSET_OVERFLOW_ONE
    over = s.get_messages("T", 0, 9)
    assert over.status is GetStatus.OFFSET_OVERFLOW_BADLY and over.next_begin_offset == 5
    assert s.get_messages("T", 0, 2, max_count=2).next_begin_offset == 4


def test_tag_filter_counts_filtered_entries(open_store):
    s = open_store()
    for i in range(6):
        s.put("T", 0, b"%d" % i, {"TAGS": "A" if i % 3 == 0 else "B"})
    a = lib.shmq_tag_code_of_props(b"TAGS\x01A", 6)
    got = s.get_messages("T", 0, 0, tag_codes={a})
    assert bodies(got) == [b"0", b"3"] and got.next_begin_offset == 6
    none = s.get_messages("T", 0, 0, tag_codes={12345})
    assert none.status is GetStatus.NO_MATCHED_MESSAGE and none.next_begin_offset == 6


def test_rolling_over_tiny_files(open_store, store_root):
    s = open_store(mapped_file_size_commitlog=4096, cq_entries_per_file=7)
    n = 500
    for i in range(n):
        s.put("Roll", i % 2, b"%05d" % i + b"." * (i % 300))
    files = sorted(os.listdir(store_root / "commitlog"))
    assert len(files) > 20
    for q in (0, 1):
        got_all = []
        off = 0
        while True:
            g = s.get_messages("Roll", q, off, max_count=13)
            if g.status is not GetStatus.FOUND:
                break
            got_all += [b[:5] for b in bodies(g)]
            off = g.next_begin_offset
        assert got_all == [b"%05d" % i for i in range(q, n, 2)]
    # every file but the last ends in a BLANK filler or exactly at its end
    rep = verify_store(s.cfg, s.commit_pos)
    assert rep.ok, rep.problems
    assert rep.records == n


def test_record_too_big_for_file_is_refused(open_store):
    s = open_store(mapped_file_size_commitlog=4096)
    with pytest.raises(MessageTooLarge):
        s.put("T", 0, b"x" * 5000)
    assert s.commit_pos == 0


def test_batch_is_one_queue_consecutive_offsets(open_store):
    s = open_store()
    s.put("B", 0, b"first")
    entries = [(b"b%d" % i, b"KEYS\x01k%d" % i, i) for i in range(50)]
    r = s.put_batch("B", 0, encode_batch(entries), {"CLUSTER": "c1"})
    assert (r.queue_offset, r.count) == (1, 50)
    got = s.get_messages("B", 0, 1, max_count=64)
    msgs = [decode_record(m) for m in got.messages]
    assert [bytes(m.body) for m in msgs] == [b"b%d" % i for i in range(50)]
    assert [m.flag for m in msgs] == list(range(50))
    assert msgs[7].properties == {"KEYS": "k7", "CLUSTER": "c1"}
    assert [m.queue_offset for m in msgs] == list(range(1, 51))


def test_malformed_batch_changes_nothing(open_store):
    s = open_store()
    good = encode_batch([(b"a", b"", 0)])
    for bad in (b"", good[:-1], good + b"\x00\x00", b"\x00" * 21):
        with pytest.raises(InvalidMessage):
            s.put_batch("B", 0, bad)
    assert s.commit_pos == 0 and s.max_offset("B", 0) == 0


@pytest.mark.parametrize("topic,why", [("", "non-empty"), ("a b", "allowed"), ("x" * 128, "longer"),
                                      ("t/../x", "allowed"), (None, "string")])
def test_invalid_topic_refused(open_store, topic, why):
    s = open_store()
    with pytest.raises(InvalidTopic, match=why):
        s.put(topic, 0, b"x")
    assert s.commit_pos == 0


def test_oversized_body_and_properties_refused(open_store):
    s = open_store(max_message_size=1000)
    with pytest.raises(MessageTooLarge):
        s.put("T", 0, b"x" * 1001)
    with pytest.raises(InvalidMessage, match="32767"):
        s.put("T", 0, b"x", b"K\x01" + b"v" * 32766)
    w = s.queue_writer("T", 0)
    with pytest.raises(MessageTooLarge):
        w.put(b"x" * 1001)
    assert s.commit_pos == 0
    s.put("T", 0, b"fine")
    assert s.max_offset("T", 0) == 1


def test_offset_by_time_and_earliest(open_store):
    s = open_store()
    times = []
    for i in range(6):
        times.append(s.put("T", 0, b"%d" % i).store_timestamp)
        time.sleep(0.003)
    assert s.offset_by_time("T", 0, 0) == 0
    assert s.offset_by_time("T", 0, times[3]) == 3
    assert s.offset_by_time("T", 0, times[-1] + 1000) == 6
    assert s.earliest_store_time("T", 0) == times[0]


def test_consumer_offsets_persist(store_root):
    s = MessageStore.open(small_config(store_root))
    s.put("T", 0, b"x")
    assert s.query_offset("g1", "T", 0) == -1
    s.commit_offset("g1", "T", 0, 1)
    s.commit_offset("g1", "T", 3, 17)
    s.close()
    text = (store_root / "config" / "consumerOffset.json").read_text()
    assert text == '{"offsetTable":{"T@g1":{0:1,3:17}}}'
    s = MessageStore.open(small_config(store_root))
    try:
        assert s.query_offset("g1", "T", 3) == 17
    finally:
        s.close()


def test_second_owner_refused_and_closed_handle(store_root):
    s = MessageStore.open(small_config(store_root))
    with pytest.raises(StoreLocked):
        MessageStore.open(small_config(store_root))
    s.close()
    with pytest.raises(StoreClosed):
        s.put("T", 0, b"x")


def test_clean_restart_keeps_everything(store_root):
    s = MessageStore.open(small_config(store_root))
    for i in range(300):
        s.put("T", i % 3, b"%d" % i, {"KEYS": f"k{i}"})
    end = s.commit_pos
    s.close()
    assert not (store_root / "abort").exists()
    s = MessageStore.open(small_config(store_root))
    try:
        assert s.commit_pos == end
        assert [s.max_offset("T", q) for q in range(3)] == [100, 100, 100]
        r = s.put("T", 0, b"next")
        assert r.queue_offset == 100 and r.phys_offset >= end
    finally:
        s.close()


def test_query_by_key_through_the_index(open_store):
    s = open_store()
    for i in range(200):
        s.put("T", 0, b"%d" % i, {"KEYS": f"order-{i % 20} extra", "UNIQ_KEY": f"U{i:05d}"})
    s.dispatcher.wait_until(s.commit_pos)
    found = [bytes(decode_record(m).body) for m in s.query_by_key("T", "order-7", 64)]
    assert sorted(found, key=int) == [b"%d" % i for i in range(7, 200, 20)]
    assert [bytes(decode_record(m).body) for m in s.query_by_key("T", "U00042")] == [b"42"]
    assert s.query_by_key("Other", "order-7") == []


def test_attached_process_queries_the_owners_index(open_store):
    s = open_store()
    for i in range(30):
        s.put("T", 0, b"%d" % i, {"KEYS": f"key{i % 3}"})
    s.dispatcher.wait_until(s.commit_pos)
    s.dispatcher.index.flush()
    a = MessageStore.attach(s.cfg.root)
    try:
        assert len(a.query_by_key("T", "key1", 64)) == 10
    finally:
        a.close()
