"""IndexFile (RocketMQ's byte layout) and IndexService (roll-over, query, recovery, cleanup).

Expected bytes are built by hand with literal offsets, not with the module's constants, so a
wrong constant cannot agree with itself.
"""
import errno
import os
import stat
import struct
import subprocess
import sys
import tempfile
import threading

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from shmq.errors import DiskFull, StoreClosed, StoreCorrupt, StoreError, StoreReadOnly
from shmq.message.javahash import java_string_hash
from shmq.store import index_file as index_file_mod
from shmq.store.index_file import IndexFile, file_size, index_key_hash
from shmq.store.index_service import IndexService, _name_after, index_file_name

T0 = 1_700_000_000_000          # a store timestamp (ms)
ALL = (0, 2**62)                # a time range covering everything


@pytest.fixture
def small(tmp_path):
    f = IndexFile.create(tmp_path / "20240101000000000", hash_slot_num=4, index_num=8)
    yield f
    f.close()


def header(buf):
    return struct.unpack_from(">qqqqii", buf, 0)


class TestKeyHash:
    def test_abs_of_java_hash(self):
        assert java_string_hash("Hello World") == -862545276
        assert index_key_hash("Hello World") == 862545276
        assert index_key_hash("hello") == 99162322

    def test_min_value_maps_to_zero(self):
        # Math.abs(Integer.MIN_VALUE) is still negative; RocketMQ then uses 0.
        assert index_key_hash("polygenelubricants") == 0


class TestLayout:
    def test_new_file(self, tmp_path):
        path = tmp_path / "f"
        with IndexFile.create(path, 4, 8) as f:
            assert f.index_count == 1 and f.hash_slot_count == 0 and not f.is_full()
        data = path.read_bytes()
        assert len(data) == 40 + 4 * 4 + 8 * 20 == file_size(4, 8)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        # indexCount starts at 1: entry 0 is the "no entry" marker.
        assert data == bytes(36) + struct.pack(">i", 1) + bytes(16 + 160)

    def test_rolled_file_starts_at_previous_end(self, tmp_path):
        with IndexFile.create(tmp_path / "f", 4, 8, begin_phy_offset=777, begin_timestamp=T0) as f:
            assert header(f._mm) == (T0, T0, 777, 777, 0, 1)
            f.put_key("a", 900, T0 + 5000)
            # The first put replaces begin; its own time diff is 0.
            assert header(f._mm) == (T0 + 5000, T0 + 5000, 900, 900, 1, 2)
            assert f.entries() == [(97, 900, 0, 0)]

    def test_bytes_after_puts_with_collision_chain(self, tmp_path):
        path = tmp_path / "f"
        with IndexFile.create(path, 4, 8) as f:
            # "a" (97) and "e" (101) share slot 1; "b" (98) is alone in slot 2.
            assert f.put_key("a", 100, T0)
            assert f.put_key("e", 200, T0 + 2500)      # 2.5 s -> timeDiff 2 (truncated)
            assert f.put_key("b", 300, T0 + 3000)
            assert f.put_key("a", 400, T0 + 3999)      # -> 3
        expected = bytearray(216)
        struct.pack_into(">qqqqii", expected, 0, T0, T0 + 3999, 100, 400, 2, 5)
        struct.pack_into(">4i", expected, 40, 0, 4, 3, 0)          # slots 0..3
        entries = [(97, 100, 0, 0), (101, 200, 2, 1), (98, 300, 3, 0), (97, 400, 3, 2)]
        for n, e in enumerate(entries, start=1):
            struct.pack_into(">iqii", expected, 56 + n * 20, *e)
        assert path.read_bytes() == bytes(expected)

    def test_min_value_key_goes_to_slot_zero(self, small):
        small.put_key("polygenelubricants", 5, T0)
        assert struct.unpack_from(">i", small._mm, 40)[0] == 1
        assert small.entries() == [(0, 5, 0, 0)]
        assert small.select_phy_offsets("polygenelubricants", 10, *ALL) == [5]

    def test_reopen_reads_header(self, tmp_path):
        path = tmp_path / "f"
        with IndexFile.create(path, 4, 8) as f:
            f.put_key("a", 1, T0)
            f.put_key("b", 2, T0 + 1000)
            f.flush()
        with IndexFile.open(path, 4, 8) as g:
            assert (g.begin_timestamp, g.end_timestamp) == (T0, T0 + 1000)
            assert (g.begin_phy_offset, g.end_phy_offset) == (1, 2)
            assert (g.hash_slot_count, g.index_count) == (2, 3)
            assert g.select_phy_offsets(["a", "b"], 10, *ALL) == [1, 2]

    def test_zero_index_count_on_disk_means_empty(self, tmp_path):
        # RocketMQ leaves 0 at @36 until the first put or flush; load() reads it as 1.
        path = tmp_path / "f"
        path.write_bytes(bytes(file_size(4, 8)))
        with IndexFile.open(path, 4, 8) as f:
            assert f.index_count == 1
            assert f.put_key("a", 1, T0)
            assert f.entries() == [(97, 1, 0, 0)]

    def test_wrong_size_is_corrupt(self, tmp_path):
        path = tmp_path / "f"
        IndexFile.create(path, 4, 8).close()
        with pytest.raises(StoreCorrupt):
            IndexFile.open(path, 4, 9)

    def test_create_never_overwrites(self, tmp_path):
        IndexFile.create(tmp_path / "f", 4, 8).close()
        with pytest.raises(FileExistsError):
            IndexFile.create(tmp_path / "f", 4, 8)

    def test_full_disk_is_a_clean_error(self, tmp_path, monkeypatch):
        def no_space(fd, off, size):
            raise OSError(errno.ENOSPC, "No space left on device")
        monkeypatch.setattr(index_file_mod.os, "posix_fallocate", no_space)
        with pytest.raises(DiskFull):
            IndexFile.create(tmp_path / "f", 4, 8)
        assert not (tmp_path / "f").exists()

    def test_closed_file_says_so(self, small):
        small.close()
        small.close()
        with pytest.raises(StoreClosed, match="closed"):
            small.put_key("a", 1, T0)


class TestPutAndSelect:
    def test_full(self, tmp_path):
        with IndexFile.create(tmp_path / "f", 4, 4) as f:
            assert [f.put_key(f"k{i}", i, T0) for i in range(3)] == [True] * 3
            assert f.is_full() and f.index_count == 4
            assert f.put_key("k9", 9, T0) is False
            assert f.entries()[-1][1] == 2 and f.end_phy_offset == 2

    def test_newest_first_and_max_num(self, small):
        for i in range(5):
            small.put_key("k", 10 * i, T0 + i * 1000)
        assert small.select_phy_offsets("k", 10, *ALL) == [40, 30, 20, 10, 0]
        assert small.select_phy_offsets("k", 2, *ALL) == [40, 30]
        assert small.select_phy_offsets("other", 10, *ALL) == []

    def test_time_range_at_second_precision(self, small):
        small.put_key("k", 1, T0)               # reads back T0
        small.put_key("k", 2, T0 + 2500)        # reads back T0 + 2000
        small.put_key("k", 3, T0 + 5000)        # reads back T0 + 5000
        assert small.select_phy_offsets("k", 10, T0, T0 + 2000) == [2, 1]
        assert small.select_phy_offsets("k", 10, T0 + 2100, T0 + 6000) == [3]
        assert small.select_phy_offsets("k", 10, T0 + 1, T0 + 4999) == [2]
        assert small.select_phy_offsets("k", 10, T0 + 6000, T0 + 9000) == []

    def test_hash_collisions_are_returned(self, small):
        # Same String.hashCode: the index cannot tell them apart; the broker checks KEYS.
        small.put_key("Aa", 1, T0)
        small.put_key("BB", 2, T0)
        small.put_key("Ae", 3, T0)              # hash 2116: same slot (0), other hash
        assert small.select_phy_offsets("Aa", 10, *ALL) == [2, 1]

    def test_duplicate_offsets_are_returned_once(self, small):
        small.put_key("k", 7, T0)
        small.put_key("k", 7, T0)
        small.put_key("k", 8, T0)
        assert small.select_phy_offsets("k", 10, *ALL) == [8, 7]
        assert small.select_phy_offsets(["k", "k"], 10, *ALL) == [8, 7]

    def test_time_diff_is_clamped(self, small):
        small.put_key("k", 1, T0)
        small.put_key("k", 2, T0 - 10_000)      # clock went back: diff 0, not negative
        small.put_key("k", 3, T0 + (2**31 + 5) * 1000)
        assert [e[2] for e in small.entries()] == [0, 0, 2**31 - 1]

    def test_stale_slot_is_not_chained_to_itself(self, small):
        # A put that died after its slot store but before the count store.
        small.put_key("a", 1, T0)
        struct.pack_into(">iqii", small._mm, 56 + 2 * 20, 98, 99, 0, 1)
        struct.pack_into(">i", small._mm, 40 + 2 * 4, 2)                  # slot of "b" -> 2
        assert small.put_key("b", 2, T0)        # overwrites entry 2
        assert small.entries()[1] == (98, 2, 0, 0)
        assert small.select_phy_offsets("b", 10, *ALL) == [2]
        assert small.select_phy_offsets("a", 10, *ALL) == [1]

    def test_corrupt_cycle_terminates(self, small):
        small.put_key("a", 1, T0)
        small.put_key("a", 2, T0)
        struct.pack_into(">i", small._mm, 56 + 20 + 16, 2)   # entry 1 -> entry 2 -> entry 1
        assert small.select_phy_offsets("a", 10, *ALL) == [2, 1]


def service(path, slots=4, num=4):
    s = IndexService(path, hash_slot_num=slots, index_num=num)
    s.load()
    return s


class TestService:
    def test_keys_uniq_key_and_skips(self, tmp_path):
        with service(tmp_path, num=64) as s:
            s.build("T", "  k1 k2  k1", "U1", 100, T0, 0)
            s.build("T", None, None, 200, T0, 0)                  # nothing to index
            s.build("T", "k1", None, 300, T0 + 1000, 0xC)         # rollback: skipped
            s.build("T", "k1", None, 300, T0 + 1000, 0x8)         # commit: indexed
            s.build("T", "k1", None, 150, T0 + 1000, 0)           # below endPhyOffset: skipped
            s.build("T", "k1", None, 300, T0 + 1000, 0)           # == endPhyOffset: again
            assert s.query("T", "k1", 10, *ALL) == [300, 100]
            assert s.query("T", "k2", 10, *ALL) == [100]
            assert s.query("T", "U1", 10, *ALL) == [100]
            assert s.query("T2", "k1", 10, *ALL) == []
            assert s.query("T", "", 10, *ALL) == []
            assert s.last_phy_offset == 300 and s.last_timestamp == T0 + 1000
            assert [e[0] for e in s.files()[0].entries()] == [
                index_key_hash(k) for k in ("T#U1", "T#k1", "T#k2", "T#k1", "T#k1", "T#k1")]

    def test_roll_over_and_names(self, tmp_path):
        with service(tmp_path) as s:                             # 3 keys a file
            for i in range(10):
                s.build("T", f"k{i % 2}", None, i * 10, T0 + i * 1000, 0)
            files = s.files()
            names = [f.name for f in files]
            assert len(files) == 4 and names == sorted(names) and len(set(names)) == 4
            assert all(f.is_full() for f in files[:-1])
            # Each rolled file starts at the first record it holds.
            assert [f.begin_phy_offset for f in files] == [0, 30, 60, 90]
            assert s.query("T", "k0", 10, *ALL) == [80, 60, 40, 20, 0]
            assert s.query("T", "k1", 3, *ALL) == [90, 70, 50]
            assert s.query("T", "k1", 10, T0 + 3000, T0 + 7000) == [70, 50, 30]
        assert sorted(os.listdir(tmp_path)) == names

    def test_record_keys_span_two_files(self, tmp_path):
        with service(tmp_path) as s:
            s.build("T", "a b", None, 10, T0, 0)
            s.build("T", "c d", None, 20, T0, 0)                 # "d" goes to file 2
            files = s.files()
            assert len(files) == 2 and files[1].begin_phy_offset == 20
            for k, want in (("a", [10]), ("c", [20]), ("d", [20])):
                assert s.query("T", k, 10, *ALL) == want

    def test_reopen_gives_same_answers(self, tmp_path):
        s = service(tmp_path)
        for i in range(20):
            s.build("T", f"k{i % 3} x", f"u{i}", i * 100, T0 + i * 10, 0)
        before = {k: s.query("T", k, 50, *ALL) for k in ("k0", "k1", "k2", "x", "u7")}
        last = s.last_phy_offset
        s.close()
        s.close()
        with pytest.raises(StoreClosed):
            s.query("T", "x", 1, *ALL)
        with service(tmp_path) as s2:
            assert {k: s2.query("T", k, 50, *ALL) for k in before} == before
            assert s2.last_phy_offset == last
            s2.build("T", "x", None, 5000, T0 + 1000, 0)
            assert s2.query("T", "x", 2, *ALL) == [5000, 1900]

    def test_truncate_after(self, tmp_path):
        with service(tmp_path) as s:
            for i in range(9):                                   # files: 0-20, 30-50, 60-80
                s.build("T", "k", None, i * 10, T0, 0)
            assert s.truncate_after(100) is None                 # nothing at or past the cut
            assert len(s.files()) == 3
            # File 3 begins past the cut: gone. File 2 holds 30, 40 (kept records) and 50
            # (cut): gone too, and the caller must re-dispatch from its begin.
            assert s.truncate_after(45) == 30
            assert [f.begin_phy_offset for f in s.files()] == [0]
            assert s.query("T", "k", 10, *ALL) == [20, 10, 0]
            assert s.last_phy_offset == 20
            for off in (30, 40):                                 # the caller's re-dispatch
                s.build("T", "k", None, off, T0, 0)
            assert s.query("T", "k", 10, *ALL) == [40, 30, 20, 10, 0]
            # A file whose newest entry is exactly at the cut names a record that is gone.
            assert s.truncate_after(40) == 30
            assert s.query("T", "k", 10, *ALL) == [20, 10, 0]
            assert s.truncate_after(0) is None
            assert s.files() == [] and s.last_phy_offset == 0
            assert os.listdir(tmp_path) == []

    def test_delete_expired(self, tmp_path):
        with service(tmp_path) as s:
            for i in range(9):
                s.build("T", "k", None, i * 10, T0, 0)
            assert s.delete_expired(20) == 0                     # file 1 ends at 20
            assert s.delete_expired(55) == 2
            assert [f.begin_phy_offset for f in s.files()] == [60]
            assert s.delete_expired(10**9) == 0                  # never the newest
            assert s.query("T", "k", 10, *ALL) == [80, 70, 60]
            assert len(os.listdir(tmp_path)) == 1

    def test_same_millisecond_names(self, tmp_path):
        assert index_file_name(0)[-3:] == "000"
        assert _name_after("20241231235959999") == "20250101000000000"
        with service(tmp_path, num=2) as s:                      # 1 key a file
            for i in range(30):
                s.build("T", "k", None, i, T0, 0)
            names = [f.name for f in s.files()]
            assert len(set(names)) == 30 and names == sorted(names)

    def test_flush_failure_poisons(self, tmp_path, monkeypatch):
        s = service(tmp_path)
        s.build("T", "k", None, 1, T0, 0)

        def eio(self):
            raise OSError(errno.EIO, "Input/output error")
        monkeypatch.setattr(IndexFile, "flush", eio)
        with pytest.raises(OSError):
            s.flush()
        with pytest.raises(StoreReadOnly):
            s.build("T", "k", None, 2, T0, 0)
        assert s.query("T", "k", 10, *ALL) == [1]                # reads still work
        s.close()

    def test_concurrent_queries_during_writes(self, tmp_path):
        s = service(tmp_path, slots=8, num=16)
        errors = []
        done = threading.Event()

        def reader():
            try:
                while not done.is_set():
                    got = s.query("T", "k", 1000, *ALL)
                    # Newest first, no gaps at the old end: offsets are consecutive.
                    assert got == sorted(got, reverse=True)
                    assert not got or got == list(range(got[0], got[-1] - 1, -1))
            except BaseException as e:                           # pragma: no cover
                errors.append(e)
        threads = [threading.Thread(target=reader) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            for i in range(600):
                s.build("T", "k", None, i, T0 + i, 0)
                if i % 100 == 99:
                    s.flush()
                    s.delete_expired(i - 150)
        finally:
            done.set()
            for t in threads:
                t.join()
        assert not errors
        got = s.query("T", "k", 1000, *ALL)
        assert got[0] == 599 and got == list(range(599, got[-1] - 1, -1))
        s.close()


class TestReadOnlyReader:
    """A process that does not own the index (a broker worker) follows the owner's files."""

    def test_follows_puts_rolls_and_deletes(self, tmp_path):
        w = service(tmp_path)
        r = IndexService(tmp_path, 4, 4, readonly=True)
        r.load()
        try:
            assert r.query("T", "k", 10, *ALL) == []
            w.build("T", "k", None, 10, T0, 0)
            assert r.query("T", "k", 10, *ALL) == [10]
            for i in range(2, 8):                                # rolls twice
                w.build("T", "k", None, i * 10, T0 + i, 0)
            assert r.query("T", "k", 10, *ALL) == [70, 60, 50, 40, 30, 20, 10]
            assert [f.name for f in r.files()] == [f.name for f in w.files()]
            assert r.last_phy_offset == w.last_phy_offset == 70
            assert w.delete_expired(45) == 1
            assert w.truncate_after(55) == 40
            assert r.query("T", "k", 10, *ALL) == []           # file 2 cut, file 3 gone
            assert len(r.files()) == 0 and len(w.files()) == 0
            w.build("T", "k", None, 40, T0 + 4, 0)
            assert r.query("T", "k", 10, *ALL) == [40]
            with pytest.raises(StoreError, match="read-only"):
                r.build("T", "k", None, 99, T0, 0)
            for call in (r.flush, lambda: r.delete_expired(1), lambda: r.truncate_after(1)):
                with pytest.raises(StoreError, match="read-only"):
                    call()
            with pytest.raises(StoreError, match="read-only"):
                r.files()[0].put_key("k", 1, T0)
        finally:
            r.close()
            w.close()

    def test_file_being_created_is_skipped_until_sized(self, tmp_path):
        with service(tmp_path) as w, IndexService(tmp_path, 4, 4, readonly=True) as r:
            w.build("T", "k", None, 1, T0, 0)
            r.load()
            (tmp_path / "99990101000000000").touch()             # O_CREAT done, no fallocate yet
            assert r.query("T", "k", 10, *ALL) == [1] and len(r.files()) == 1
            (tmp_path / "99990101000000000").write_bytes(bytes(file_size(4, 4)))
            r.refresh()
            assert len(r.files()) == 2 and r.files()[1].index_count == 1

    def test_other_process(self, tmp_path):
        with service(tmp_path) as w:
            for i in range(7):
                w.build("T", f"k{i % 2}", None, i, T0 + i, 0)
            w.flush()
            code = ("import sys; from shmq.store.index_service import IndexService as S; "
                    "r = S(sys.argv[1], 4, 4, readonly=True); r.load(); "
                    "print(r.query('T', 'k0', 10, 0, 2**62)); r.close()")
            out = subprocess.run([sys.executable, "-W", "error", "-c", code, str(tmp_path)],
                                 capture_output=True, text=True, timeout=60)
            assert out.returncode == 0, out.stderr
            assert out.stdout.strip() == "[6, 4, 2, 0]"


_ALPHABET = [f"k{i}" for i in range(8)]
assert len({index_key_hash("T#" + k) for k in _ALPHABET}) == len(_ALPHABET)

_records = st.lists(
    st.tuples(
        st.lists(st.sampled_from(_ALPHABET), max_size=4),          # KEYS words
        st.one_of(st.none(), st.sampled_from(_ALPHABET)),          # UNIQ_KEY
        st.integers(1, 50),                                        # offset gap
        st.integers(0, 3000),                                      # time step (ms)
        st.sampled_from([0, 0, 0, 0x4, 0x8, 0xC]),                 # sysflag
    ),
    max_size=40)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, slots=st.integers(1, 5), num=st.integers(2, 6),
       max_num=st.integers(1, 12))
def test_every_key_finds_exactly_its_offsets(records, slots, num, max_num):
    model: dict[str, list[int]] = {k: [] for k in _ALPHABET}
    with tempfile.TemporaryDirectory() as d:
        s = service(d, slots, num)
        try:
            offset, ts = 0, T0
            for words, uniq, gap, step, sysflag in records:
                offset += gap
                ts += step
                s.build("T", " ".join(words), uniq, offset, ts, sysflag)
                if sysflag != 0xC:
                    for k in {*words, *([uniq] if uniq is not None else [])}:
                        model[k].append(offset)
            for k, offsets in model.items():
                want = offsets[::-1][:max_num]
                assert s.query("T", k, max_num, *ALL) == want
                assert s.query("T", k, max_num, T0, ts) == want
        finally:
            s.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=_records, slots=st.integers(1, 5), num=st.integers(2, 6), data=st.data())
def test_truncate_then_replay_matches_the_cut_log(records, slots, num, data):
    """Recovery as dispatch.py does it: cut the log at a record boundary, truncate the index
    there, re-dispatch from min(rebuild offset, last_phy_offset); the index then answers as if
    only the records below the cut had ever been written."""
    log, offset, ts = [], 0, T0
    for words, uniq, gap, step, sysflag in records:
        offset += gap
        ts += step
        log.append((offset, ts, " ".join(words), uniq, sysflag))
    cut = data.draw(st.sampled_from([r[0] for r in log] + [offset + 1]), label="cut")
    with tempfile.TemporaryDirectory() as d:
        s = service(d, slots, num)
        try:
            for off, t, keys, uniq, sysflag in log:
                s.build("T", keys, uniq, off, t, sysflag)
            rebuild = s.truncate_after(cut)
            start = s.last_phy_offset if rebuild is None else min(rebuild, s.last_phy_offset)
            for off, t, keys, uniq, sysflag in log:
                if start <= off < cut:
                    s.build("T", keys, uniq, off, t, sysflag)
            for k in _ALPHABET:
                want = [off for off, _, keys, uniq, sysflag in reversed(log)
                        if off < cut and sysflag != 0xC and (k in keys.split() or uniq == k)]
                assert s.query("T", k, 100, *ALL) == want
        finally:
            s.close()
