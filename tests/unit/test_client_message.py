"""shmq.Message, whose attributes and __init__ are C (shmq/native/hot_message.c): the behaviour
of the Python class it replaced, argument by argument."""
import copy
import datetime
import gc
import pickle

import pytest

from shmq import Message


def test_arguments_and_defaults():
    m = Message("T", b"b")
    assert (m.topic, m.body, m.tags, m.keys, m.properties, m.delay_level, m.flag) == ("T", b"b", None, None, {}, 0, 0)
    m = Message("T", b"b", "tg", "k1 k2", {"a": "1"}, 2, 7)
    assert (m.tags, m.keys, m.properties, m.delay_level, m.flag) == ("tg", "k1 k2", {"a": "1"}, 2, 7)
    m = Message(flag=3, body=b"x", topic="U", keys=["a", "b"])
    assert (m.topic, m.body, m.flag, m.key_list()) == ("U", b"x", 3, ["a", "b"])
    assert repr(m) == "Message(topic='U', tags=None, keys=['a', 'b'], 1 bytes)"


def test_body_is_bytes_and_text_is_refused():
    assert Message("T", bytearray(b"ab")).body == b"ab" and type(Message("T", memoryview(b"cd")).body) is bytes
    with pytest.raises(TypeError, match="encode text yourself"):
        Message("T", "text")
    with pytest.raises(TypeError):
        Message("T", 1.5)


def test_properties_are_copied():
    p = {"a": "1"}
    m = Message("T", b"x", properties=p)
    p["b"] = "2"
    assert m.properties == {"a": "1"} and m.properties is not p
    assert Message("T", b"x", properties=[("k", "v")]).properties == {"k": "v"}
    assert Message("T", b"x", properties={}).properties == {}


def test_timer_arguments_become_properties():
    assert Message("T", b"x", deliver_at=1234).properties == {"TIMER_DELIVER_MS": "1234"}
    at = datetime.datetime(2030, 1, 1, tzinfo=datetime.timezone.utc)
    assert Message("T", b"x", deliver_at=at).properties["TIMER_DELIVER_MS"] == str(int(at.timestamp() * 1000))
    m = Message("T", b"x", properties={"u": "1"}, delay=datetime.timedelta(seconds=2))
    assert m.properties == {"u": "1", "TIMER_DELAY_MS": "2000"}
    for kw, err in (({"deliver_at": 1, "delay": 2}, ValueError), ({"deliver_at": "x"}, TypeError),
                    ({"delay": -1}, ValueError), ({"deliver_at": datetime.datetime(2030, 1, 1)}, ValueError)):
        with pytest.raises(err):
            Message("T", b"x", **kw)


@pytest.mark.parametrize("args, kw", [(("T",), {}), ((), {"topic": "T"}), (("T", b"x", "a"), {"tags": "b"}),
                                      (("T", b"x"), {"nope": 1}), (("T", b"x", None, None, None, 0, 0, 0), {}),
                                      (("T", b"x", None, None, None, 0, 0, None), {})])
def test_bad_calls_are_type_errors(args, kw):
    with pytest.raises(TypeError):
        Message(*args, **kw)


def test_attributes_behave_as_slots():
    m = Message("T", b"x")
    m.tags = "new"
    assert m.tags == "new"
    del m.tags
    with pytest.raises(AttributeError):
        m.tags
    with pytest.raises(AttributeError):
        m.other = 1
    m.__init__("U", b"again")
    assert (m.topic, m.body, m.tags) == ("U", b"again", None)
    a, b = Message("T", b"a"), Message("T", b"b")   # each its own (empty) properties dict
    a.properties["k"] = "v"
    assert a.properties == {"k": "v"} and b.properties == {} and b.properties is b.properties
    del b.properties
    with pytest.raises(AttributeError):
        b.properties
    b.properties = {"z": "1"}
    assert b.properties == {"z": "1"}
    with pytest.raises(AttributeError):
        Message.__new__(Message).properties


def test_subclasses_pickle_copy_and_cycles():
    class Sub(Message):
        __slots__ = ()

    class WithInit(Message):
        def __init__(self, body):
            super().__init__("W", body, tags="w")
            self.extra = 1
    s, w = Sub("T", b"s", keys="k"), WithInit(b"w")
    assert type(s) is Sub and s.keys == "k" and (w.topic, w.tags, w.extra) == ("W", "w", 1)
    m = Message("T", b"x", "tg", ["k"], {"a": "b"}, 1, 2)
    for twin in (pickle.loads(pickle.dumps(m)), copy.copy(m), copy.deepcopy(m)):
        assert type(twin) is Message
        assert [getattr(twin, f) for f in Message._FIELDS] == [getattr(m, f) for f in Message._FIELDS]
    loop = Message("T", b"x")
    loop.properties["self"] = loop
    del loop
    gc.collect()


def test_freeing_messages_keeps_the_class_references_and_finalizers():
    """Message instances are freed by hot_message.c's own dealloc (subclasses through CPython's,
    which ends in it); each instance's reference to its class is given back either way, a very
    deep chain of messages is freed without exhausting the C stack, and a __del__ given to a
    class later is called."""
    import sys

    class Sub(Message):
        __slots__ = ()

    class WithDict(Message):
        pass
    for cls in (Message, Sub, WithDict):
        gc.collect()
        before = sys.getrefcount(cls)
        made = [cls("T", b"x") for _ in range(100)]
        del made
        gc.collect()
        assert sys.getrefcount(cls) == before
    m = Message("T", b"x")
    for _ in range(100_000):
        m = Message("T", b"x", properties={"inner": m})
    del m
    seen = []

    class Late(Message):
        __slots__ = ()
    Late.__del__ = lambda self: seen.append(self.body)
    Late("T", b"late")
    assert seen == [b"late"]
