"""A queue prepared off the send path (Appender.prepare, shmq_cq_prepare: what a local producer
does when it learns a topic's route) is appended to without mapping anything on the append's
path, has exactly the page of its next entry allocated, and keeps every entry another writer
stored; a queue nobody prepared or wrote still takes no disk."""
import os
import subprocess
import sys

from shmq.message.record import decode_record
from shmq.native import lib
from shmq.store.queue_files import prepare_first
from tests.conftest import REPO

FULL = 300_000  # RocketMQ's entries per file: 6,000,000-byte files


def _allocated(path) -> int:
    return os.stat(path).st_blocks * 512


def test_prepared_queue_first_append_maps_nothing_on_its_path(open_store):
    s = open_store(cq_entries_per_file=FULL)
    prepare_first(s.cfg, "P", range(4))  # the broker makes a topic's files sparse when it is created
    prepare_first(s.cfg, "Idle", range(4))
    a = s.appender
    # the control: an unprepared queue's first append maps its file on the path
    before = lib.shmq_cq_attaches()
    s.put("P", 3, b"unprepared")
    assert lib.shmq_cq_attaches() == before + 1
    for q in range(3):
        a.prepare(a.slot("P", q))
        assert _allocated(s.queues.get("P", q).path(0)) == 4096  # the page of entry 0, no more
    before = lib.shmq_cq_attaches()
    for q in range(3):
        for i in range(5):
            s.put("P", q, b"m%d" % i)
    assert lib.shmq_cq_attaches() == before  # nothing opened or mapped by these appends
    for q in range(3):
        got = s.get_messages("P", q, 0, max_count=10, max_bytes=1 << 20)
        assert [bytes(decode_record(m).body) for m in got.messages] == [b"m%d" % i for i in range(5)]
    # a topic no one prepared or wrote: its files are still all hole
    assert sum(_allocated(s.queues.get("Idle", q).path(0)) for q in range(4)) == 0


def test_prepare_of_a_queue_being_written_keeps_its_entries(open_store):
    """Another writer's entries lie below next_offset: prepare's zeros land past their page."""
    s = open_store(cq_entries_per_file=FULL)
    prepare_first(s.cfg, "W", [0])
    for i in range(300):  # 6,000 bytes of entries: the second page is partly written
        s.put("W", 0, b"w%d" % i)
    s.appender._prepared.clear()
    lib.shmq_writer_unmap(s.appender.w)  # as a fresh process: no mapping, nothing known reserved
    s.appender.prepare(s.appender.slot("W", 0))
    for i in range(300, 310):
        s.put("W", 0, b"w%d" % i)
    cq = s.queues.get("W", 0)
    assert s.max_offset("W", 0) == 310
    assert all(cq.entry(off)[1] > 0 for off in range(310))  # every entry intact (size > 0)


def test_prepare_of_a_file_not_made_yet_makes_it(open_store):
    s = open_store(cq_entries_per_file=FULL)
    a = s.appender
    a.prepare(a.slot("New", 0))  # no file: ENEEDCQ, created sparse, then prepared
    assert _allocated(s.queues.get("New", 0).path(0)) == 4096
    before = lib.shmq_cq_attaches()
    s.put("New", 0, b"x")
    assert lib.shmq_cq_attaches() == before and s.max_offset("New", 0) == 1


_NO_SPACE = r"""
import resource, signal, sys
from shmq.store import MessageStore
from shmq.errors import DiskFull
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
s = MessageStore.attach(sys.argv[1])
a = s.appender
slot = a.slot("Full", 0)
soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
resource.setrlimit(resource.RLIMIT_FSIZE, (1, hard))  # pwrite of the page fails (EFBIG)
a.prepare(slot)                                      # answered here: no exception, not marked
assert slot not in a._prepared
try:
    s.queue_writer("Full", 0).put(b"x")
except Exception as e:                               # the append meets it again and says so
    print("refused", type(e).__name__)
resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
s.queue_writer("Full", 0).put(b"after")
print("stored")
"""


def test_prepare_that_cannot_allocate_leaves_it_to_the_append(open_store):
    s = open_store(cq_entries_per_file=FULL)
    prepare_first(s.cfg, "Full", [0])
    r = subprocess.run([sys.executable, "-c", _NO_SPACE, s.cfg.root], cwd=REPO, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert "refused StoreError" in r.stdout and "stored" in r.stdout
    assert s.max_offset("Full", 0) == 1
