"""ConsumeQueue files are sparse: disk follows what is stored, not how many queues exist, and
an append that cannot allocate the page of its entry stores nothing (an error, not SIGBUS)."""
import os
import subprocess
import sys

from shmq.store.consume_queue import ConsumeQueue
from shmq.store.queue_files import prepare_first, prepare_next
from tests.conftest import REPO, small_config

FULL = 300_000  # RocketMQ's entries per file: 6,000,000-byte files


def _cq_allocated(cfg) -> tuple[int, int]:
    """(bytes allocated to ConsumeQueue files, number of files)."""
    total = n = 0
    for d, _, names in os.walk(cfg.consumequeue_dir):
        for f in names:
            total += os.stat(os.path.join(d, f)).st_blocks * 512
            n += 1
    return total, n


def test_thousand_queues_use_disk_for_what_they_store(open_store):
    s = open_store(cq_entries_per_file=FULL, mapped_file_size_commitlog=1 << 20)
    for t in range(125):
        prepare_first(s.cfg, f"T{t}", range(8))  # what the broker does when a topic is created
    alloc, files = _cq_allocated(s.cfg)
    assert files == 1000 and alloc == 0  # 1,000 queues, 6 GB of files in name, nothing on disk
    for t in range(125):
        for q in range(8):
            s.put(f"T{t}", q, b"x")
    alloc, _ = _cq_allocated(s.cfg)
    assert alloc <= 1000 * 4096  # a page per queue (it was 6,000,000 bytes each)
    for i in range(20_000):  # one queue grows: its allocation grows with it, a little ahead
        s.put("T0", 0, b"y")
    q0 = os.stat(s.queues.get("T0", 0).path(0)).st_blocks * 512
    assert 20_001 * 20 <= q0 <= 20_001 * 20 + 2 * 65536
    for t in range(125):
        for q in range(8):
            assert s.max_offset(f"T{t}", q) == (20_001 if (t, q) == (0, 0) else 1)


def test_next_file_made_ahead(open_store):
    s = open_store()
    for i in range(95):
        s.put("T", 0, b"m%d" % i)
    cq = s.queues.get("T", 0)
    assert not prepare_next(cq, 80) and prepare_next(cq, 95)  # the last eighth of 100 entries
    assert os.path.exists(cq.path(1)) and os.stat(cq.path(1)).st_blocks == 0
    for i in range(95, 150):
        s.put("T", 0, b"m%d" % i)
    assert s.max_offset("T", 0) == 150 and s.queues.get("T", 0).entry(149)[1] > 0


def test_recovery_writes_allocate_and_clearing_keeps_holes(tmp_path):
    cfg = small_config(tmp_path, cq_entries_per_file=FULL)
    cq = ConsumeQueue(cfg, "T", 0)
    assert cq.create_first() and not cq.create_first()
    for off in range(0, 300_000, 30_000):  # entries far apart: only their pages are allocated
        cq.write_entry(off, 1000 + off, 100, 7)
    blocks = os.stat(cq.path(0)).st_blocks * 512
    assert blocks <= 10 * 65536 and cq.entry(270_000) == (271_000, 100, 7)
    cq.clear_from(1)
    # zeros only where data was (+ the extent tree once synced), not the 6 MB of the whole file
    assert os.stat(cq.path(0)).st_blocks * 512 <= blocks + 65536
    assert cq.entry(0) is not None and cq.entry(30_000) is None and cq.last_offset() == 1
    cq.close()


def test_entries_past_a_hole_are_found_reading_only_what_is_allocated(tmp_path):
    """After a crash recovery asks whether a queue holds entries past its count (a power cut
    can keep a page of entries beyond a dropped one): the answer reads only allocated ranges,
    and still finds an entry at the far end of a 6 MB file, or a page of zeros for what it is."""
    cfg = small_config(tmp_path, cq_entries_per_file=FULL)
    cq = ConsumeQueue(cfg, "T", 0)
    cq.create_first()
    for off in range(0, 10):
        cq.write_entry(off, 1000 + 100 * off, 100, 7)
    assert not cq.has_entries_from(10)
    cq.write_entry(299_999, 9_000, 100, 7)  # past a 6 MB hole, in the file's last page
    assert cq.has_entries_from(10) and cq.has_entries_from(299_999)
    cq.clear_from(10)
    assert not cq.has_entries_from(10) and cq.entry(9) is not None
    with open(cq.path(0), "r+b") as f:  # an allocated page of zeros in the middle is no entry
        f.seek(150_000 * 20)
        f.write(bytes(4096))
    assert not cq.has_entries_from(10)
    cq.close()


_LIMITED = r"""
import resource, signal, sys
from shmq.errors import StoreError
from shmq.store import MessageStore
from shmq.store.queue_files import prepare_first
from tests.conftest import small_config
s = MessageStore.open(small_config(sys.argv[1], cq_entries_per_file=300_000))
s.put("A", 0, b"before")
prepare_first(s.cfg, "B", [0])
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (1024, resource.RLIM_INFINITY))  # write(2) past 1 KiB fails
end = s.commit_pos
try:
    s.put("B", 0, b"cannot be queued")
    print("stored")
except StoreError as e:
    print("refused:", e)
print("unchanged" if s.commit_pos == end and s.max_offset("B", 0) == 0 else "changed")
s.put("A", 0, b"after")  # its page was allocated before the limit
print("A", s.max_offset("A", 0))
s.close()
"""


def test_append_that_cannot_allocate_its_page_stores_nothing(store_root):
    r = subprocess.run([sys.executable, "-c", _LIMITED, str(store_root)], cwd=REPO, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert lines[0].startswith("refused: cannot map or allocate a ConsumeQueue file: File too large"), r.stdout
    assert lines[1:] == ["unchanged", "A 2"], r.stdout


def test_preparer_makes_every_queue_file_when_its_topic_appears(tmp_path):
    from shmq.store.queue_files import QueueFilePreparer
    cfg = small_config(tmp_path, cq_entries_per_file=FULL)
    topics = [("A", 3)]
    svc = QueueFilePreparer(cfg, lambda: topics)
    svc.run_once()
    topics.append(("B", 2))
    topics[0] = ("A", 5)  # the topic updated to more queues
    svc.run_once()
    assert svc.created == 7
    alloc, n = _cq_allocated(cfg)
    assert n == 7 and alloc == 0
