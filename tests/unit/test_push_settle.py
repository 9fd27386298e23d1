"""A push consumer's settling of a pulled batch (no broker: the send-back and the offset store
are stand-ins): the committed offset never passes a message the listener did not consume,
whichever consume thread finishes first."""
import threading
import types

from shmq.client.consumer_core import ProcessQueue
from shmq.client.message import ConsumeResult, MessageExt, MessageQueue
from shmq.client.push_consumer import PushConsumer


def _msg(o):
    return MessageExt("T", b"x", None, [], {}, "", "", 0, o, 0, 0, 0, 0)


def _consumer(listener, send_back_ok):
    c = PushConsumer("g", consume_threads=0, consume_batch_size=4)
    c.on_message(listener)
    commits, resubmitted = [], []
    # the offset store's update sees every commit: ConsumerCore.commit's and the inline path's
    # own copy of its body (PushConsumer._consume_inline)
    c.offsets = types.SimpleNamespace(update=lambda mq, off, increase_only=True: commits.append(off))
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


def test_inline_batches_settle_without_a_put_and_never_pass_a_message_going_round(monkeypatch):
    # consume_threads=0: a batch the listener consumes is never put in the ProcessQueue; one it
    # does not consume is put then; the committed offset stays at the message the broker did
    # not take back, through later inline batches, until it is consumed
    monkeypatch.setattr("shmq.client.push_consumer.time.sleep", lambda s: None)
    bad = {5}
    c, commits, again = _consumer(
        lambda msgs: ConsumeResult.RECONSUME_LATER if any(m.queue_offset in bad for m in msgs) else ConsumeResult.SUCCESS,
        lambda m: m.queue_offset != 5)
    put = []
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    real_put = pq.put
    pq.put = lambda msgs: (put.append([m.queue_offset for m in msgs]), real_put(msgs))
    for first in range(0, 16, 4):
        c._consume_inline(pq, [_msg(o) for o in range(first, first + 4)])
    assert put == [[4, 5, 6, 7]]       # only the batch the listener did not consume
    assert commits == [4, 5, 5, 5]     # held at 5 while it goes round again
    assert [m.queue_offset for m in again[0][1]] == [5] and pq.count == 1
    bad.clear()
    c._consume_concurrently(*again[0])
    assert commits[-1] == 16 and pq.count == 0
    c._consume_inline(pq, [_msg(o) for o in range(16, 20)])
    assert commits[-1] == 20 and put == [[4, 5, 6, 7]]


def test_inline_batch_larger_than_the_listener_batch_or_below_what_was_seen_is_put(monkeypatch):
    seen = []
    c, commits, _ = _consumer(lambda msgs: seen.append([m.queue_offset for m in msgs]), lambda m: True)
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    c._consume_inline(pq, [_msg(o) for o in range(0, 6)])   # 6 > consume_batch_size 4
    assert seen == [[0, 1, 2, 3], [4, 5]] and commits == [6] and pq.count == 0
    c._consume_inline(pq, [_msg(o) for o in range(2, 4)])   # below max_seen (consumed again)
    assert seen[-1] == [2, 3] and commits[-1] == 6 and pq.count == 0


def test_inline_listener_that_raises_or_answers_none(monkeypatch):
    # the inline path calls the listener itself (not through _call_listener): an exception is
    # RECONSUME_LATER (the batch put and sent back, the offset held until the send-back is
    # settled), None is SUCCESS (committed in one step, never put)
    monkeypatch.setattr("shmq.client.push_consumer.time.sleep", lambda s: None)
    answers = iter([RuntimeError("boom"), None])

    def listener(msgs):
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a

    sent_back = []
    c, commits, _ = _consumer(listener, lambda m: sent_back.append(m.queue_offset) or True)
    put = []
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    real_put = pq.put
    pq.put = lambda msgs: (put.append([m.queue_offset for m in msgs]), real_put(msgs))
    c._consume_inline(pq, [_msg(o) for o in range(0, 4)])
    assert put == [[0, 1, 2, 3]] and sent_back == [0, 1, 2, 3] and commits == [4] and pq.count == 0
    c._consume_inline(pq, [_msg(o) for o in range(4, 8)])
    assert put == [[0, 1, 2, 3]] and commits == [4, 8]


def test_a_pulled_batch_within_the_listener_batch_is_one_call_settled_as_the_loop_does(monkeypatch):
    # _consume_pulled's one-call path (a caught-up TCP consumer's every batch): SUCCESS, None and
    # an exception, a RECONSUME_LATER the broker takes back only in part, and a listener that
    # empties the list it was given (a copy: the ProcessQueue's batch is untouched)
    monkeypatch.setattr("shmq.client.push_consumer.time.sleep", lambda s: None)
    answers = iter([ConsumeResult.SUCCESS, None, RuntimeError("boom"), ConsumeResult.RECONSUME_LATER, "clear"])
    calls = []

    def listener(msgs):
        calls.append([m.queue_offset for m in msgs])
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        if a == "clear":
            msgs.clear()
            return ConsumeResult.SUCCESS
        return a

    c, commits, again = _consumer(listener, lambda m: m.queue_offset != 13)
    c.consume_threads = 20  # (the pool path's _consume_pulled; no pool is started here)
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    batches = [[_msg(o) for o in range(f, f + 4)] for f in range(0, 20, 4)]
    for b in batches:
        pq.put(b)
    for b in batches:
        c._consume_pulled(pq, b)
    assert calls == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11], [12, 13, 14, 15], [16, 17, 18, 19]]
    # 8-11 raised: all sent back (taken); 12-15: 13 not taken back, consumed here again later
    assert commits == [4, 8, 12, 13, 13] and [m.queue_offset for m in again[0][1]] == [13] and pq.count == 1
    pq.dropped = True
    c._consume_pulled(pq, [_msg(20)])  # a dropped queue's batch: not consumed
    assert len(calls) == 5


def test_inline_commit_skips_a_dropped_queue_and_lets_a_throttled_pull_thread_go():
    # _consume_inline writes ConsumerCore.commit's body out: the same two rules
    c, commits, _ = _consumer(lambda msgs: ConsumeResult.SUCCESS, lambda m: True)
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    c._throttled = True
    c._room.clear()
    c._consume_inline(pq, [_msg(o) for o in range(0, 4)])
    assert commits == [4] and c._room.is_set() and not c._throttled
    pq.dropped = True
    c._consume_inline(pq, [_msg(o) for o in range(4, 8)])
    assert commits == [4]             # a dropped queue is not delivered to, nor committed
