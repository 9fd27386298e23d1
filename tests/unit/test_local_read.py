"""The local consumer's C record walk (MessageStore.queue_reader -> shmq.native.hot_read) gives
the same MessageExt as the one decoder (message_from_view over get_messages), across
CommitLog and ConsumeQueue file boundaries, and stops where get_messages has to decide:
a compressed record, a record past the commit position, a record that does not check."""
import zlib

from shmq.client.message import message_from_view
from shmq.message.layout import FLAG_COMPRESSED, R_MAGIC
from shmq.native import ffi, hot_read
from shmq.store import MessageStore

from ..conftest import small_config

def _addr(cdata) -> int:
    return int(ffi.cast("uintptr_t", cdata if ffi.typeof(cdata).kind == "pointer" else ffi.addressof(cdata)))


PROPS = {"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "0A0B", "u": "v"}


def _store(root, n=250, size=700):
    store = MessageStore.open(small_config(root))  # 64 KiB logs, 100-entry CQ files: both roll
    for i in range(n):
        store.put("T", 1, bytes([i % 251]) * size, PROPS if i % 3 else {}, flag=i % 5,
                  born_host=("10.1.2.3", 4000 + i), reconsume_times=i % 4)
    return store


def _one_decoder(store, offset, count):
    res = store.get_messages("T", 1, offset, count, max_bytes=1 << 30)
    return [message_from_view(v, 0, "b1") for v in res.messages], res.next_begin_offset


def test_same_messages_as_the_one_decoder_across_file_boundaries(store_root):
    store = _store(store_root)
    try:
        reader = store.queue_reader("T", 1, "b1")
        got, pos = [], 0
        while pos < 250:
            msgs, nxt = reader.read(pos, 32)
            assert msgs and nxt == pos + len(msgs)
            want, _ = _one_decoder(store, pos, len(msgs))
            assert msgs == want
            got += msgs
            pos = nxt
        assert [m.queue_offset for m in got] == list(range(250))
        assert got[7].tags == "A" and got[7].keys == ["k1", "k2"] and got[7].born_host == ("10.1.2.3", 4007)
        assert got[6].properties == {} and got[6].msg_id == got[6].offset_msg_id
        assert reader.read(250, 32) == ([], 250)  # caught up
        assert store.queue_reader("T", 9) is None  # no such queue
    finally:
        store.close()


def test_stops_at_a_compressed_record_and_at_the_commit_position(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        for i in range(3):
            store.put("T", 1, b"plain %d" % i)
        store.put("T", 1, zlib.compress(b"z" * 1000), sysflag=FLAG_COMPRESSED)
        store.put("T", 1, b"after")
        reader = store.queue_reader("T", 1, "b1")
        msgs, nxt = reader.read(0, 32)
        assert [m.body for m in msgs] == [b"plain 0", b"plain 1", b"plain 2"] and nxt == 3
        assert reader.read(3, 32) == ([], 3)  # get_messages decompresses it
        cq = store.queues.get("T", 1).map(0)
        log = store.commitlog.map(0)
        # a commit position at the start of the third record: it is not read
        pos = ffi.new("shmq_positions *")
        pos.commit_pos, pos.min_pos = msgs[2].commit_log_offset, 0
        nxt = ffi.new("int64_t *", 5)
        only_two, used, _ = hot_read(cq, 0, 0, 5, log, 0, _addr(pos), _addr(nxt), "T", b"T", "b1")
        assert used == 2 and [m.body for m in only_two] == [b"plain 0", b"plain 1"]
        nxt[0] = 1  # and the queue's published next offset bounds it too
        assert hot_read(cq, 0, 0, 5, log, 0, _addr(store.cb.ctl.pos), _addr(nxt), "T", b"T", "b1")[1] == 1
    finally:
        store.close()


def test_stops_at_a_record_that_does_not_check(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        for i in range(3):
            store.put("T", 1, b"m%d" % i)
        msgs, _ = store.queue_reader("T", 1).read(0, 32)
        log = bytearray(store.commitlog.map(0)[:store.commit_pos])
        log[msgs[1].commit_log_offset + R_MAGIC] ^= 0xFF
        cq = store.queues.get("T", 1).map(0)
        nxt = ffi.new("int64_t *", 3)
        got, used, _ = hot_read(cq, 0, 0, 3, log, 0, _addr(store.cb.ctl.pos), _addr(nxt), "T", b"T", "b1")
        assert used == 1 and got[0].body == b"m0"
    finally:
        store.close()
