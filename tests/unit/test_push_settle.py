"""A push consumer's settling of a pulled batch (no broker: the send-back and the offset store
are stand-ins): the committed offset never passes a message the listener did not consume,
whichever consume thread finishes first."""
import threading

from shmq.client.consumer_core import ProcessQueue
from shmq.client.message import ConsumeResult, MessageExt, MessageQueue
from shmq.client.push_consumer import PushConsumer


def _msg(o):
    return MessageExt("T", b"x", None, [], {}, "", "", 0, o, 0, 0, 0, 0)


def _consumer(listener, send_back_ok):
    c = PushConsumer("g", consume_threads=0, consume_batch_size=4)
    c.on_message(listener)
    commits, resubmitted = [], []
    c.commit = lambda pq, off: commits.append(off)
    c._send_back = lambda m, delay_level=0: send_back_ok(m)
    c._submit = lambda fn, *args: resubmitted.append(args)
    return c, commits, resubmitted


def test_reconsume_later_that_cannot_be_sent_back_holds_the_offset(monkeypatch):
    monkeypatch.setattr("shmq.client.push_consumer.time.sleep", lambda s: None)
    bad = {5}
    c, commits, again = _consumer(
        lambda msgs: ConsumeResult.RECONSUME_LATER if any(m.queue_offset in bad for m in msgs) else ConsumeResult.SUCCESS,
        lambda m: m.queue_offset != 5)  # the broker takes 4, 6, 7 back; 5 must be consumed here again
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    a, b = [_msg(o) for o in range(0, 16)], [_msg(o) for o in range(16, 32)]
    pq.put(a)
    pq.put(b)
    c._consume_pulled(pq, b)
    c._consume_pulled(pq, a)
    assert commits == [0, 5]           # b settled first: 0 still in flight; then all of a but 5
    assert [m.queue_offset for m in again[0][1]] == [5]
    bad.clear()
    c._consume_concurrently(*again[0])  # consumed on the second try
    assert commits[-1] == 32 and pq.count == 0


def test_batches_finished_by_two_threads_in_either_order():
    gate = threading.Event()

    def listener(msgs):
        if msgs[0].queue_offset < 8:
            gate.wait(5)               # the first batch's thread is slow
        return ConsumeResult.SUCCESS

    c, commits, _ = _consumer(listener, lambda m: True)
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    a, b = [_msg(o) for o in range(0, 8)], [_msg(o) for o in range(8, 16)]
    pq.put(a)
    pq.put(b)
    t = threading.Thread(target=c._consume_pulled, args=(pq, a))
    t.start()
    c._consume_pulled(pq, b)
    assert commits == [0]              # b done, a still in flight
    gate.set()
    t.join(5)
    assert commits == [0, 16] and pq.count == 0


def test_the_local_pull_threads_batch_commits_only_after_its_listener(monkeypatch):
    """consume_threads=0: the local pull thread hands a batch not yet in the ProcessQueue
    (``_local_deliver``). Nothing else in flight: the listener runs first and a SUCCESS commits
    one past the batch; a failure keeps the offset below what was not consumed; with a retry
    still in flight the batch waits behind it."""
    monkeypatch.setattr("shmq.client.push_consumer.time.sleep", lambda s: None)
    seen_commits_at_call, fail = [], {9}
    c, commits, again = _consumer(lambda msgs: (seen_commits_at_call.append(list(commits)),
                                                ConsumeResult.RECONSUME_LATER if msgs[0].queue_offset in fail
                                                else ConsumeResult.SUCCESS)[1],
                                  lambda m: False)  # the broker takes nothing back
    deliver = c._consume_inline  # start()'s _local_deliver with consume_threads=0
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    deliver(pq, [_msg(o) for o in range(0, 4)])
    assert commits == [4] and seen_commits_at_call == [[]] and pq.count == 0
    deliver(pq, [_msg(o) for o in range(4, 8)])
    assert commits == [4, 8] and pq.count == 0
    deliver(pq, [_msg(o) for o in range(9, 12)])  # 8 was filtered out before; 9 fails
    assert commits == [4, 8] and pq.count == 3              # nothing committed: all three are in flight
    assert [m.queue_offset for m in again[0][1]] == [9, 10, 11]
    deliver(pq, [_msg(o) for o in range(12, 14)])  # behind the retry: put, committed no further
    assert commits == [4, 8, 9] and pq.count == 3          # 12, 13 done, held at 9
    fail.clear()
    c._consume_concurrently(*again[0])
    assert commits[-1] == 14 and pq.count == 0
