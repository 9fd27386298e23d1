"""shmq.SendResult, a C type (shmq/native/hot_result.c): what a user sees of a send's answer,
whether a TCP send built it from the broker's fields or a local send from the append's raw ones
(the ids as bytes, the offset msgId as a commit-log offset, formatted when first read)."""
import copy
import pickle
import sys

import pytest

from shmq import SendResult, SendStatus
from shmq.client.message import MessageQueue
from shmq.message.msgid import offset_msg_id

MQ = MessageQueue("T", "broker-a", 3)
HOST = bytes([127, 0, 0, 1, 0, 0, 0x27, 0x11])
A, B = "A" * 32, "0123456789ABCDEF" * 2


def tcp_result(**kw) -> SendResult:
    return SendResult(SendStatus.SEND_OK, A, "OFF", MQ, 5, transaction_id="tx", recall_handle="h", **kw)


def test_fields_given_are_the_attributes_read():
    r = tcp_result()
    assert (r.status, r.msg_id, r.offset_msg_id, r.queue, r.queue_offset) == (SendStatus.SEND_OK, A, "OFF", MQ, 5)
    assert (r.transaction_id, r.local_transaction_state, r.recall_handle, r.queue_id) == ("tx", None, "h", 3)
    d = SendResult(SendStatus.FLUSH_DISK_TIMEOUT, A, "OFF", MQ, 6)
    assert (d.transaction_id, d.local_transaction_state, d.recall_handle) == (None, None, None)
    with pytest.raises(TypeError):
        SendResult(SendStatus.SEND_OK, A, "OFF", MQ)  # queue_offset is required
    with pytest.raises(TypeError):
        SendResult(SendStatus.SEND_OK, A, "OFF", MQ, 1, nonsense=2)


def test_raw_ids_and_offset_are_formatted_when_read():
    r = SendResult(SendStatus.SEND_OK, (A + B).encode(), 4096, MQ, 7, None, None, HOST)
    assert r.msg_id == A + "," + B  # a batch's ids, comma-joined
    assert r.offset_msg_id == offset_msg_id(HOST, 4096) == "7F00000100002711" + "%016X" % 4096
    one = SendResult(SendStatus.SEND_OK, A.encode(), 0, MQ, 0, None, None, HOST)
    assert one.msg_id == A and one.offset_msg_id == offset_msg_id(HOST, 0)


def test_attributes_are_settable():
    r = SendResult(SendStatus.SEND_OK, A.encode(), 4096, MQ, 7, None, None, HOST)
    r.msg_id, r.offset_msg_id, r.queue_offset, r.status = "X", "Y", 8, SendStatus.FLUSH_DISK_TIMEOUT
    assert (r.msg_id, r.offset_msg_id, r.queue_offset, r.status) == ("X", "Y", 8, SendStatus.FLUSH_DISK_TIMEOUT)
    with pytest.raises(AttributeError):
        r.other = 1  # no instance dict, as the __slots__ class


def test_equality_hash_and_repr():
    assert tcp_result() == tcp_result() and not tcp_result() != tcp_result()
    assert tcp_result() != SendResult(SendStatus.SEND_OK, A, "OFF", MQ, 6, transaction_id="tx")
    assert tcp_result() == SendResult(SendStatus.SEND_OK, A, "OFF", MQ, 5, "tx", recall_handle="other")
    assert tcp_result() != "a string" and not tcp_result() == None  # noqa: E711
    with pytest.raises(TypeError):
        hash(tcp_result())
    assert repr(tcp_result()) == ("SendResult(status=SendStatus.SEND_OK, msg_id='" + A + "', offset_msg_id='OFF', "
                                  "queue=MessageQueue(topic='T', broker_name='broker-a', queue_id=3), queue_offset=5)")
    raw = SendResult(SendStatus.SEND_OK, A.encode(), 16, MQ, 2, None, None, HOST)
    assert repr(raw) == repr(SendResult(SendStatus.SEND_OK, A, offset_msg_id(HOST, 16), MQ, 2))


def test_pickle_and_copy_keep_every_field():
    r = SendResult(SendStatus.SEND_OK, (A + B).encode(), 4096, MQ, 7, None, None, HOST, "handle")
    for c in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
        assert c == r and c.recall_handle == "handle" and c.msg_id == A + "," + B and c is not r


def test_results_are_freed():
    """Each result releases what it holds (the queue object is shared by every send to it)."""
    mq = MessageQueue("T", "broker-b", 1)
    before = sys.getrefcount(mq)
    for k in range(1000):
        r = SendResult(SendStatus.SEND_OK, A.encode(), k, mq, k, None, None, HOST)
        r.msg_id, r.offset_msg_id
    del r
    assert sys.getrefcount(mq) == before


def test_the_five_argument_constructor_makes_what_the_keyword_one_makes():
    """SendResult(status, msg_id, offset_msg_id, queue, queue_offset), each TCP answer's, takes
    hot_result.c's vectorcall constructor; every other call form type.__call__'s."""
    fast = SendResult(SendStatus.SEND_OK, A, "OFF", MQ, 5)
    slow = SendResult(status=SendStatus.SEND_OK, msg_id=A, offset_msg_id="OFF", queue=MQ, queue_offset=5)
    full = SendResult(SendStatus.SEND_OK, A, "OFF", MQ, 5, None, None, b"", None)
    for r in (fast, slow, full):
        assert (r.status, r.msg_id, r.offset_msg_id, r.queue, r.queue_offset, r.transaction_id,
                r.local_transaction_state, r._store_host, r.recall_handle) == (
                    SendStatus.SEND_OK, A, "OFF", MQ, 5, None, None, b"", None)
        assert r == fast and repr(r) == repr(fast) and pickle.loads(pickle.dumps(r)) == fast
    ids = SendResult(SendStatus.SEND_OK, (A + B).encode(), "OFF", MQ, 5)  # bytes: 32-char ids, joined when read
    assert ids.msg_id == A + "," + B

    class Mine(SendResult):
        pass

    assert type(Mine(SendStatus.SEND_OK, A, "OFF", MQ, 5)) is Mine
    for args in ((SendStatus.SEND_OK, A, "OFF", MQ), (SendStatus.SEND_OK, A, "OFF", MQ, 5, None, None, b"", None, 1)):
        with pytest.raises(TypeError):
            SendResult(*args)
