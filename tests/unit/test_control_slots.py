"""ControlBlock.iter_queue_slots / iter_offset_slots (the used slots found from their state bytes
in one strided copy, their names kept) answer what a cffi walk of every slot answers, also for
slots another writer adds after a first walk, and offsets that move."""
from __future__ import annotations

from shmq.native import ffi


def walk_queues(cb):
    c = cb.ctl
    for i in range(c.header.queue_capacity):
        s = c.queues[i]
        if s.state == 1:
            yield i, ffi.unpack(s.topic, s.topic_len).decode(), s.queue_id, s.next_offset, s.min_offset


def walk_offsets(cb):
    t = cb.offsets
    for i in range(cb.ctl.header.offset_capacity):
        s = t[i]
        if s.state == 1:
            yield i, ffi.unpack(s.key, s.key_len).decode(), s.queue_id, s.offset


def test_used_slots_match_a_walk_of_every_slot(open_store):
    s = open_store()
    cb = s.cb
    assert list(cb.iter_queue_slots()) == list(walk_queues(cb)) == []
    for t in range(40):
        for q in range(3):
            s.put(f"T{t}", q, b"x" * (t + 1))
    s.commit_offset("g", "T1", 0, 7)
    first = list(cb.iter_queue_slots())
    assert len(first) == 120 and first == list(walk_queues(cb))
    assert list(cb.iter_offset_slots()) == list(walk_offsets(cb))
    # new slots, as another process's appends would add them, and offsets that moved
    s.put("T0", 0, b"again")
    s.put("Late" + "x" * 100, 5, b"new queue")
    for g in range(25):
        s.commit_offset(f"g{g}", "T3", g % 3, g)
    s.commit_offset("g", "T1", 0, 9)
    assert list(cb.iter_queue_slots()) == list(walk_queues(cb))
    assert len(list(cb.iter_queue_slots())) == 121
    assert list(cb.iter_offset_slots()) == list(walk_offsets(cb))
    assert len(list(cb.iter_offset_slots())) == 26
