"""The POP journal: what was acked stays acked and what was handed out stays owed across a
reopen (a kill -9 is a reopen without close); a torn last line is dropped; compaction keeps
exactly the open state; the extraInfo / bit set texts round-trip as RocketMQ 5 writes them."""
import os

from shmq.broker.supervisor import pop_state as ps
from shmq.protocol import pop_info as pi


def ck(start=0, pt=1000, offs=(0, 1, 2), **kw):
    return ps.Checkpoint("g", "T", 0, start, pt, 5000, list(offs), **kw)


def test_replay_after_crash(tmp_path):
    s = ps.PopState(str(tmp_path))
    s.add(ck(), 3)
    s.ack(ck().key, [1])
    s.add(ck(3, 1001, (3, 4)), 5)
    s.ack((("g", "T", 0, 3, 1001)), [3, 4])     # fully acked: closed
    os.close(s._fd)                             # no close(): as a kill -9 leaves it
    r = ps.PopState(str(tmp_path))
    assert r.offsets[("g", "T", 0)] == 5
    assert list(r.cks) == [ck().key] and r.cks[ck().key].unacked() == [0, 2]
    assert r.low_offset("g", "T", 0) == 0


def test_torn_tail_is_dropped(tmp_path):
    s = ps.PopState(str(tmp_path))
    s.add(ck(), 3)
    s.close()
    with open(s.path, "ab") as f:
        f.write(b'deadbeef {"k":"A","g":"g"')     # a line cut by the crash
    r = ps.PopState(str(tmp_path))
    assert r.cks[ck().key].unacked() == [0, 1, 2]
    r.ack(ck().key, [0])                        # appends after the cut, and replays
    r.close()
    assert ps.PopState(str(tmp_path)).cks[ck().key].unacked() == [1, 2]


def test_compaction_keeps_open_state(tmp_path):
    s = ps.PopState(str(tmp_path))
    for i in range(50):
        s.add(ck(i * 3, 2000 + i, (i * 3, i * 3 + 1, i * 3 + 2)), i * 3 + 3)
        s.ack(("g", "T", 0, i * 3, 2000 + i), [i * 3] if i % 2 else [i * 3, i * 3 + 1, i * 3 + 2])
    before = {k: sorted(c.acked) for k, c in s.cks.items()}
    size = os.path.getsize(s.path)
    s.compact()
    assert os.path.getsize(s.path) < size
    s.close()
    r = ps.PopState(str(tmp_path))
    assert {k: sorted(c.acked) for k, c in r.cks.items()} == before and len(before) == 25
    assert r.offsets[("g", "T", 0)] == 150


def test_extra_info_and_bitset_texts():
    x = pi.ExtraInfo(10, 1700000000000, 60000, 0, "1", "broker-a", 2, 12)
    assert x.text() == "10 1700000000000 60000 0 1 broker-a 2 12"
    assert pi.ExtraInfo.parse(x.text()) == x
    assert pi.stored_topic("T", "g", "1") == "%RETRY%g_T" and pi.retry_mark("%RETRY%g_T") == "1"
    assert pi.bitset_offsets(pi.offsets_bitset([10, 12, 19], 10), 10) == [10, 12, 19]
    assert pi.offsets_bitset([0, 2], 0) == "BQ=="                  # java.util.BitSet{0,2}.toByteArray()
    assert pi.parse_infos("0 1 5;1 0 7") == {"0@1": "5", "1@0": "7"}
