"""Several processes appending to one store at once: every message present exactly once,
each queue's offsets dense from 0, every ConsumeQueue entry pointing at its record."""
import collections

from shmq.message.record import decode_record
from shmq.store.verify import verify_store


def read_all(store, topic, queues):
    out = collections.defaultdict(list)
    for q in range(queues):
        off = 0
        while True:
            g = store.get_messages(topic, q, off, max_count=256, max_bytes=1 << 20)
            if not g.messages:
                break
            for raw in g.messages:
                m = decode_record(raw)
                assert m.queue_id == q and m.topic == topic
                out[q].append((m.queue_offset, bytes(m.body)))
            off = g.next_begin_offset
    return out


def test_four_processes_fifty_thousand_each(open_store, children):
    s = open_store(mapped_file_size_commitlog=1 << 20, cq_entries_per_file=3000)
    procs = [children.store_child(s.cfg.root, "write", f"w{k}", 50_000, 8) for k in range(4)]
    assert [p.wait(timeout=240) for p in procs] == [0, 0, 0, 0]
    per_queue = read_all(s, "T", 8)
    seen = collections.Counter()
    for q, items in per_queue.items():
        assert [o for o, _ in items] == list(range(len(items))), f"queue {q} offsets not dense"
        seen.update(b for _, b in items)
    assert sum(seen.values()) == 200_000
    assert all(c == 1 for c in seen.values())
    assert set(seen) == {f"w{k}:{i}".encode() for k in range(4) for i in range(50_000)}
    rep = verify_store(s.cfg, s.commit_pos)
    assert rep.ok, rep.problems[:5]
    assert rep.records == 200_000


def test_batches_from_two_processes(open_store, children):
    s = open_store(mapped_file_size_commitlog=1 << 20, cq_entries_per_file=1000)
    procs = [children.store_child(s.cfg.root, "batch", f"b{k}", 20_000, 64, 4) for k in range(2)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    per_queue = read_all(s, "T", 4)
    total = sum(len(v) for v in per_queue.values())
    assert total == 2 * (20_000 // 64) * 64
    for q, items in per_queue.items():
        # a batch is contiguous in its queue
        bodies = [b for _, b in items]
        for i in range(0, len(bodies), 64):
            wid = bodies[i].split(b":")[0]
            assert all(b.split(b":")[0] == wid for b in bodies[i:i + 64])
    assert verify_store(s.cfg, s.commit_pos).ok
