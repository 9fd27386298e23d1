"""ProcessQueue: the messages between pull and consume, and the offset that is safe to commit
(the smallest still in flight, or one past everything seen), whatever order batches are put
and consumed in."""
from shmq.client.consumer_core import ProcessQueue
from shmq.client.message import MessageQueue


class _M:
    def __init__(self, off):
        self.queue_offset = off


def _ms(*offs):
    return [_M(o) for o in offs]


def test_commit_offset_follows_the_smallest_in_flight():
    pq = ProcessQueue(MessageQueue("T", "b", 0), 10)
    a, b = _ms(10, 11, 12), _ms(13, 14)
    pq.put(a)
    pq.put(b)
    pq.put([])
    assert pq.count == 5 and pq.max_seen == 14
    assert pq.remove(b) == 10          # 10..12 still in flight
    assert pq.remove(a[1:]) == 10
    assert pq.remove(a[:1]) == 15      # nothing in flight: one past everything seen


def test_a_batch_out_of_order_and_a_lower_batch_after_a_higher_one():
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    pq.put(_ms(7, 5, 6))
    pq.put(_ms(3, 4))                  # lower than what is in flight (a retry put back, say)
    assert pq.max_seen == 7
    assert pq.remove(_ms(3)) == 4
    assert pq.remove(_ms(4, 5, 6)) == 7
    assert pq.remove(_ms(7)) == 8
