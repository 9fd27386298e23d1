"""MessageExt objects made by the local consumer's C record walk (shmq/native/hot.c) are freed by
hot.c's own dealloc onto a free list and reused by the next decode: a reused object is the same
message as the one decoder's, field by field; pickling, copying, repr and equality are those of
the Python class; subclasses, finalizers and reference cycles are freed as CPython frees them."""
import copy
import gc
import pickle
import sys
import weakref

from shmq.client.message import MessageExt, message_from_view
from shmq.store import MessageStore

from ..conftest import small_config

FIELDS = ("topic", "body", "tags", "keys", "properties", "msg_id", "offset_msg_id", "queue_id", "queue_offset",
          "reconsume_times", "born_timestamp", "store_timestamp", "commit_log_offset", "sysflag", "flag",
          "broker_name", "born_host", "store_host", "raw")


def _store(root, n=150):
    store = MessageStore.open(small_config(root))
    for i in range(n):
        props = {"TAGS": "t%d" % (i % 4), "KEYS": "k%d" % i, "UNIQ_KEY": "%032X" % i} if i % 2 else {}
        store.put("T", 1, b"m%d" % i * (i % 7), props, flag=i % 3, born_host=("10.0.0.%d" % (i % 5), 9000 + i),
                  reconsume_times=i % 2)
    return store


def _fields(m):
    return tuple(getattr(m, f) for f in FIELDS)


def test_reused_objects_are_the_one_decoders_messages_field_by_field(store_root):
    store = _store(store_root)
    try:
        reader = store.queue_reader("T", 1, "b1")
        for _ in range(3):  # every round after the first decodes into freed objects
            pos = 0
            while pos < 150:
                msgs, nxt = reader.read(pos, 32)
                assert msgs and nxt == pos + len(msgs)
                want = [message_from_view(v, 0, "b1")
                        for v in store.get_messages("T", 1, pos, len(msgs), max_bytes=1 << 30).messages]
                assert [type(m) for m in msgs] == [MessageExt] * len(msgs)
                assert [_fields(m) for m in msgs] == [_fields(w) for w in want]
                assert msgs == want and [repr(m) for m in msgs] == [repr(w) for w in want]
                pos = nxt
                del msgs, want
    finally:
        store.close()


def test_pickle_copy_and_cycles_of_decoded_messages(store_root):
    store = _store(store_root, n=4)
    try:
        msgs, _ = store.queue_reader("T", 1, "b1").read(0, 4)
        for m in msgs:
            for twin in (pickle.loads(pickle.dumps(m)), copy.copy(m), copy.deepcopy(m)):
                assert type(twin) is MessageExt and _fields(twin) == _fields(m) and twin == m
        class Mark:
            pass
        mark = Mark()
        gone = weakref.ref(mark)
        msgs[0].raw = (msgs[0], mark)  # a cycle through a slot: the GC frees it
        del msgs, mark
        gc.collect()
        assert gone() is None
    finally:
        store.close()


def test_freeing_keeps_class_references_subclasses_and_finalizers(store_root):
    store = _store(store_root, n=100)
    reader = store.queue_reader("T", 1, "b1")
    try:
        class Sub(MessageExt):
            __slots__ = ("extra",)

        class WithDict(MessageExt):
            pass
        args = ("T", b"x", None, [], {}, "id", "off", 1, 2, 0, 3, 4, 5)
        for cls, make in ((MessageExt, lambda: reader.read(0, 100)[0]),
                          (MessageExt, lambda: [MessageExt(*args) for _ in range(100)]),
                          (Sub, lambda: [Sub(*args) for _ in range(100)]),
                          (WithDict, lambda: [WithDict(*args) for _ in range(100)])):
            gc.collect()
            before = sys.getrefcount(cls)
            made = make()
            for m in made[:3]:
                m.raw = m  # a cycle through a slot
                if cls is not MessageExt:
                    m.extra = made  # a subclass's own slot / __dict__
            del made, m
            gc.collect()
            assert sys.getrefcount(cls) == before
        seen = []

        class Late(MessageExt):
            __slots__ = ()
        Late.__del__ = lambda self: seen.append(self.body)
        Late(*args)
        assert seen == [b"x"]
        assert [m.queue_offset for m in reader.read(0, 100)[0]] == list(range(100))
    finally:
        store.close()


class _WithDict(MessageExt):
    """a subclass with a __dict__ (module level: pickled by name)"""


def test_numeric_fields_are_c_values_read_and_set_as_ints(store_root):
    # the eight numeric fields live in MessageExt's C base (shmq/native/hot_ext.c): a decoded
    # message's read as the one decoder's ints, are set with ints (as the retry path adds to
    # reconsume_times), refuse a non-integer, and are pickled and copied with a subclass's own
    # state beside them
    import pytest

    from shmq.client.message import _EXT_NUMBERS
    store = _store(store_root, n=8)
    try:
        msgs, _ = store.queue_reader("T", 1, "b1").read(0, 8)
        want = [message_from_view(v, 0, "b1") for v in store.get_messages("T", 1, 0, 8, max_bytes=1 << 30).messages]
        for m, w in zip(msgs, want):
            got = [getattr(m, f) for f in _EXT_NUMBERS]
            assert got == [getattr(w, f) for f in _EXT_NUMBERS] and all(type(v) is int for v in got)
        m = msgs[1]
        assert (m.queue_id, m.queue_offset, m.reconsume_times, m.flag) == (1, 1, 1, 1)
        m.reconsume_times += 1
        m.commit_log_offset = 1 << 62
        assert (m.reconsume_times, m.commit_log_offset) == (2, 1 << 62)
        with pytest.raises(TypeError):
            m.queue_offset = "3"
        with pytest.raises(OverflowError):
            m.queue_offset = 1 << 64
        assert m.queue_offset == 1
    finally:
        store.close()

    d = _WithDict("T", b"x", None, [], {}, "id", "off", 7, 8, 9, 10, 11, 12, 13, 14)
    d.extra = [1]
    for twin in (pickle.loads(pickle.dumps(d)), copy.copy(d), copy.deepcopy(d)):
        assert type(twin) is _WithDict and twin.extra == [1] and twin == d
        assert [getattr(twin, f) for f in _EXT_NUMBERS] == [7, 8, 9, 10, 11, 12, 13, 14]
