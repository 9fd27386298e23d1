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


def _batches(first, n, size):
    return [_ms(*range(first + i * size, first + (i + 1) * size)) for i in range(n)]


def test_whole_batches_settled_out_of_order_commit_the_lowest_unsettled():
    # consume threads finish pulled batches in any order: the committed offset waits for the first
    pq = ProcessQueue(MessageQueue("T", "b", 0), 100)
    a, b, c = _batches(100, 3, 32)
    for x in (a, b, c):
        pq.put(x)
    assert pq.count == 96
    assert pq.remove(b) == 100
    assert pq.remove(a) == 164         # past a and the already settled b in one step
    assert pq.count == 32
    assert pq.remove(c) == 196


def test_a_partly_consumed_batch_never_commits_past_its_unconsumed_message():
    # RECONSUME_LATER for one message that could not be sent back: the rest is settled, the
    # failed one stays in flight (re-consumed locally), and the offset waits at it
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    a, b = _batches(0, 2, 32)
    pq.put(a)
    pq.put(b)
    failed = a[5]
    assert pq.remove([m for m in a if m is not failed]) == 5
    assert pq.remove(b) == 5
    assert pq.count == 1
    pq.put(_ms(64, 65))                # pulls go on meanwhile
    assert pq.remove([failed]) == 64
    assert pq.first(10)[0].queue_offset == 64


def test_a_batch_with_gaps_and_orderly_first():
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    pq.put(_ms(0, 1, 2))
    pq.put(_ms(4, 9, 10))              # a filtered pull: not contiguous
    pq.put(_ms(11, 12))
    assert [m.queue_offset for m in pq.first(4)] == [0, 1, 2, 4]
    assert pq.remove(pq.first(4)) == 9
    assert pq.remove(_ms(9, 10, 11, 12)) == 13


def test_random_settling_matches_the_lowest_in_flight():
    # a reference model: whatever mix of whole batches, parts and single messages is settled,
    # in whatever order, and batches consumed inline without being put between them,
    # remove() and consumed() answer min(in flight) or one past everything seen
    import random
    rnd = random.Random(7)
    for _ in range(200):
        pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
        nxt, live, pending = 0, {}, []
        for _ in range(rnd.randint(1, 30)):
            if rnd.random() < 0.15:  # consumed inline by its puller, never put (consumed())
                size = rnd.randint(1, 8)
                got = pq.consumed(nxt, nxt + size - 1)
                nxt += size
                assert got == (min(live) if live else nxt) and pq.max_seen == nxt - 1
                assert pq.count == len(live)
                continue
            if rnd.random() < 0.6 or not pending:
                size = rnd.randint(1, 8)
                offs = list(range(nxt, nxt + size))
                if rnd.random() < 0.2 and size > 2:
                    offs.pop(rnd.randrange(1, size - 1))   # a gap
                batch = _ms(*offs)
                nxt += size
                pq.put(batch)
                live.update((m.queue_offset, m) for m in batch)
                pending.append(batch)
                continue
            batch = pending.pop(rnd.randrange(len(pending)))
            if rnd.random() < 0.3 and len(batch) > 1:      # partly: some go round again
                k = rnd.randint(1, len(batch) - 1)
                part, rest = batch[:k], batch[k:]
                rnd.shuffle(part)
                pending.append(rest)
                batch = part
            for m in batch:
                del live[m.queue_offset]
            got = pq.remove(batch)
            assert got == (min(live) if live else pq.max_seen + 1)
            assert pq.count == len(live)
