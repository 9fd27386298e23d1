"""Producer.send / send_batch are C (ProducerBase, shmq/native/hot_producer.c): the local C
send first, the Python methods for everything it does not take. What a caller sees: the same
answers and errors, whichever step answered."""
import pytest

from shmq import Message, Producer
from shmq.errors import InvalidMessage, ShmqError
from shmq.native import ProducerBase


class Recording(ProducerBase):
    def __init__(self, hot=None, hot_batch=None):
        self._hot, self._hot_batch, self.calls = hot, hot_batch, []

    def _send(self, msg, timeout=None):
        self.calls.append(("send", msg, timeout))
        return "python"

    def _send_batch(self, msgs, timeout=None):
        self.calls.append(("batch", msgs, timeout))
        return "python batch"


def test_the_c_step_answers_or_hands_the_same_call_to_the_python_method():
    p = Recording(hot=lambda m: "c" if m == "mine" else None, hot_batch=lambda ms: "c batch" if ms == ["b"] else None)
    assert p.send("mine") == "c" and p.calls == []
    assert p.send("other") == "python" and p.calls == [("send", "other", None)]
    assert p.send("mine", 2.0) == "python" and p.send("mine", timeout=3.0) == "python"  # a timeout: Python's
    assert p.calls[1:] == [("send", "mine", 2.0), ("send", "mine", 3.0)]
    assert p.send_batch(["b"]) == "c batch" and p.send_batch(["x"]) == "python batch"
    assert p.calls[-1] == ("batch", ["x"], None)
    with pytest.raises(TypeError):
        p.send()                                   # the Python method's own argument check
    assert Recording().send("mine") == "python"     # no C step set


def test_an_error_of_the_c_step_reaches_the_caller():
    def refuse(m):
        raise ValueError("refused")
    p = Recording(hot=refuse)
    with pytest.raises(ValueError, match="refused"):
        p.send("m")
    assert p.calls == []


def test_a_subclass_override_of_send_is_used():
    class Mine(Recording):
        def send(self, msg, timeout=None):
            return "override " + super().send(msg, timeout)
    assert Mine(hot=lambda m: "c").send("m") == "override python"


def test_a_producer_that_is_not_started_says_so():
    for local in ("never", "auto"):
        p = Producer("g-not-started", local=local)
        with pytest.raises(ShmqError, match="not started"):
            p.send(Message("T", b"x"))
        with pytest.raises(InvalidMessage, match="empty"):
            p.send_batch([])
