"""Expiry: only files older than fileReservedTime go, never the one being written; files are
unlinked whole, so a reader holding a view into a deleted file still reads it."""
import os
import time

from shmq.message.record import decode_record
from shmq.store import GetStatus


def fill(s, n):
    for i in range(n):
        s.put("T", 0, b"%06d" % i + b"." * 400)


def age(path, hours):
    t = time.time() - hours * 3600
    os.utime(path, (t, t))


def test_only_expired_files_go(open_store, store_root):
    s = open_store(mapped_file_size_commitlog=8192, cq_entries_per_file=10, file_reserved_time_hours=1)
    fill(s, 100)
    cl = store_root / "commitlog"
    files = sorted(cl.iterdir())
    assert len(files) >= 5
    for f in files[:3]:
        age(f, 2)
    assert s.cleaner.run_once(at_delete_hour=False, disk_ratio=10) == []  # not the hour
    first_view = s.get_messages("T", 0, 0, max_count=1).messages[0]
    deleted = s.cleaner.run_once(at_delete_hour=True, disk_ratio=10)
    assert deleted == [0, 1, 2]
    # (a later file the store makes ahead meanwhile may have joined them: a helper's run at load 8)
    assert not any(f.exists() for f in files[:3]) and all(f.exists() for f in files[3:])
    # a reader that held a view into a deleted file still reads it
    assert bytes(decode_record(first_view).body)[:6] == b"000000"
    mn = s.min_offset("T", 0)
    assert mn > 0
    g = s.get_messages("T", 0, 0)
    assert g.status is GetStatus.OFFSET_TOO_SMALL and g.next_begin_offset == mn
    g = s.get_messages("T", 0, mn, max_count=1)
    assert g.status is GetStatus.FOUND and decode_record(g.messages[0]).queue_offset == mn
    # whole ConsumeQueue files below the new minimum are gone too
    cq_files = sorted((store_root / "consumequeue" / "T" / "0").iterdir())
    assert int(cq_files[0].name) // 20 <= mn


def test_disk_pressure_deletes_oldest_but_never_the_current(open_store, store_root):
    s = open_store(mapped_file_size_commitlog=8192, cq_entries_per_file=10, file_reserved_time_hours=1000,
                   disk_max_used_space_ratio=75)
    fill(s, 40)
    cl = store_root / "commitlog"
    current = s.commit_pos // 8192
    for _ in range(50):
        s.cleaner.run_once(at_delete_hour=False, disk_ratio=90)
    left = sorted(int(f.name) // 8192 for f in cl.iterdir())
    assert left[0] == current
    s.put("T", 0, b"still writable")
    assert s.max_offset("T", 0) == 41


def test_disk_above_ratio_deletes_expired_files_before_the_hour(open_store, store_root):
    s = open_store(mapped_file_size_commitlog=8192, cq_entries_per_file=10, file_reserved_time_hours=1,
                   disk_max_used_space_ratio=75)
    fill(s, 100)
    files = sorted((store_root / "commitlog").iterdir())
    age(files[0], 2)
    assert s.cleaner.run_once(at_delete_hour=False, disk_ratio=80) == [0]   # expired: at once
    assert s.cleaner.run_once(at_delete_hour=False, disk_ratio=80) == []    # the rest is young
