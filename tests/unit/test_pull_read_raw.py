"""A worker's unfiltered pull answer in one C call (QueueReader.read_raw -> hot.c read_raw) is
byte for byte what get_messages answers FOUND with (the records joined, count, next offset,
max and min offset) from every offset, count and byte limit, across ConsumeQueue and CommitLog
file boundaries; and it answers None (get_messages decides) wherever get_messages does not
answer FOUND or skips what it cannot read: out of range, past the commit position, expired."""
from shmq.native import ffi, read_raw
from shmq.store import MessageStore

from ..conftest import small_config


def _want(store, offset, count, max_bytes):
    res = store.get_messages("T", 1, offset, count, max_bytes)
    if res.status.value != "FOUND":
        return None
    return (b"".join(bytes(m) for m in res.messages), len(res.messages), res.next_begin_offset, res.max_offset,
            res.min_offset)


def test_same_answer_as_get_messages_from_every_offset_across_file_boundaries(store_root):
    store = MessageStore.open(small_config(store_root))  # 64 KiB logs, 100-entry CQ files: both roll
    try:
        for i in range(250):
            store.put("T", 1, bytes([i % 251]) * (300 + 7 * (i % 50)), {"TAGS": "A"} if i % 2 else {})
        reader = store.queue_reader("T", 1)
        mismatches, found, singles = [], 0, 0
        for offset in range(0, 252):
            for count, max_bytes in ((1, 256 * 1024), (32, 256 * 1024), (32, 2000), (5, 1)):
                got, want = reader.read_raw(offset, count, max_bytes), _want(store, offset, count, max_bytes)
                if got is None:
                    continue  # get_messages decides (a read across a file boundary, the end)
                found += 1
                singles += count == 1
                if got != want:
                    mismatches.append((offset, count, max_bytes))
        assert not mismatches
        assert singles == 250  # every one-message read in C, whichever files it maps
        assert found >= 850  # and most longer ones: those across a file boundary are get_messages' own
        assert reader.read_raw(250, 32, 1 << 20) is None and reader.read_raw(-1, 32, 1 << 20) is None
        assert store.queue_reader("T", 1).read_raw(3, 2, 1 << 20) == _want(store, 3, 2, 1 << 20)  # a fresh reader
    finally:
        store.close()


def test_nothing_past_the_commit_position_and_none_for_an_expired_entry(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        for i in range(4):
            store.put("T", 1, b"m%d" % i)
        reader = store.queue_reader("T", 1)
        assert reader.read_raw(0, 32, 1 << 20)[1:3] == (4, 4)
        first = store.get_messages("T", 1, 0, 32).messages
        st = list(reader.st)
        pos = ffi.new("shmq_positions *")
        pos.commit_pos, pos.min_pos = store.commit_pos - len(first[3]), 0  # the last record not committed
        st[7] = int(ffi.cast("uintptr_t", pos))
        body, n, nxt, _, _ = read_raw(st, 0, 32, 1 << 20)
        assert (body, n, nxt) == (b"".join(bytes(m) for m in first[:3]), 3, 3)
        assert read_raw(st, 3, 32, 1 << 20) == -1  # nothing readable at 3 yet: get_messages says so
        pos.commit_pos, pos.min_pos = store.commit_pos, store.commit_pos - len(first[3]) - len(first[2])
        assert read_raw(st, 0, 32, 1 << 20) == -1  # expired: get_messages skips it, C does not guess
        assert read_raw(st, 0, 0, 1 << 20) == -1
    finally:
        store.close()
