"""Regression tests for the durability bugs the power-loss harness found, in one process and
deterministic enough for CI: the store runs with the durability trace on, its flush thread
is stopped where a power cut would stop it, and several cuts (image.py) are opened.

1. A new CommitLog or ConsumeQueue file's name (and its new directories) was never fsynced:
   a cut could remove a whole file whose pages had been msynced (every SYNC_FLUSH ack in it
   lost). The flusher now makes the names durable before counting the bytes as flushed.
2. After recovery the checkpoint said every ConsumeQueue entry below the recovered end was on
   disk, while the entries recovery had just rewritten were not synced: a second cut lost
   them and the next recovery, trusting the checkpoint, never rebuilt them.
3. A consumer offset persisted beyond what the CommitLog recovered (a consumer read records
   the cut took) skipped as many new messages after the restart: it is now capped at the
   queue's recovered max offset.
4. ConsumeQueue entries a cut left beyond a page of zeros survived recovery (below).
"""
import os

import posix_ipc
import pytest

from shmq.message.record import decode_record
from shmq.store import SYNC_FLUSH, MessageStore
from shmq.store import faults
from shmq.store.control import segment_name
from shmq.store.consume_queue import ENTRY, ENTRY_SIZE
from shmq.store.offsets_file import FILE as OFFSETS_FILE
from shmq.store.verify import verify_store

from tests.conftest import small_config

from .image import power_cut

pytestmark = pytest.mark.crash
SEEDS = range(8)
N = 300


@pytest.fixture
def traced(tmp_path, monkeypatch):
    d = tmp_path / "trace"
    d.mkdir()
    monkeypatch.setattr(faults, "TRACE_DIR", str(d))
    monkeypatch.setattr(faults, "TRACING", True)
    monkeypatch.setattr(faults, "ACTIVE", True)
    return d


@pytest.fixture
def stores(tmp_path):
    """open(root, services=True, **cfg) -> an owner store, closed and its segment removed at teardown."""
    opened = []

    def open_(root, services=True, **kw):
        s = MessageStore.open(small_config(root, **kw), start_services=services)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        s.close()
        try:
            posix_ipc.unlink_shared_memory(segment_name(s.cfg.root))
        except posix_ipc.ExistentialError:
            pass


def put_all(s, n=N):
    for i in range(n):
        s.put("T", i % 2, b"%d|" % i + b"x" * 900)


def stop_services(s):
    """Where a power cut stops the owner: no more flushes, nothing flushed on the way out."""
    for svc in (s.flusher, s.dispatcher, s.cleaner):
        if svc is not None:
            svc.stop()


def bodies(s):
    out = []
    for q in (0, 1):
        off = s.min_offset("T", q)
        while True:
            g = s.get_messages("T", q, off, max_count=64)
            if not g.messages:
                break
            out += [bytes(decode_record(m).body).split(b"|")[0] for m in g.messages]
            off = g.next_begin_offset
    return out


def test_new_files_names_survive_a_power_cut(traced, stores, tmp_path):
    s = stores(tmp_path / "live", flush_disk_type=SYNC_FLUSH, flush_interval_consume_queue_ms=600_000)
    put_all(s)                          # every put returned after its msync (SYNC_FLUSH)
    stop_services(s)
    s.flusher.flush_queues_and_checkpoint()   # the queues and the checkpoint too, then the cut
    assert len(s.commitlog.file_indexes()) > 3 and len(s.queues.get("T", 0).file_indexes()) > 1
    for seed in SEEDS:
        image = tmp_path / f"image-{seed}"
        power_cut(s.cfg.root, str(traced), str(image), seed)
        r = stores(image)
        assert len(bodies(r)) == N, f"seed {seed}: {len(bodies(r))} of {N} messages after the cut"
        assert verify_store(r.cfg, r.commit_pos).ok


def test_queue_entries_recovery_rewrote_survive_a_second_cut(traced, stores, tmp_path):
    s = stores(tmp_path / "live", flush_disk_type=SYNC_FLUSH, flush_interval_consume_queue_ms=600_000)
    put_all(s)
    stop_services(s)                    # the log is durable, its ConsumeQueue entries are not
    for seed in SEEDS:
        first, second = tmp_path / f"first-{seed}", tmp_path / f"second-{seed}"
        power_cut(s.cfg.root, str(traced), str(first), seed, durable_into=str(traced))
        r = stores(first, services=False)   # recovery rewrites the entries the cut dropped
        assert len(bodies(r)) == N
        power_cut(str(first), str(traced), str(second), seed + 100)   # cut again at once
        again = stores(second)
        assert len(bodies(again)) == N, f"seed {seed}: {len(bodies(again))} of {N} after the second cut"


def test_consumer_offset_past_the_recovered_end_is_capped(stores, tmp_path):
    root = tmp_path / "live"
    s = stores(root)
    put_all(s, 10)                      # 5 per queue
    s.close()                           # persists offsets (none) and removes the abort file
    open(os.path.join(s.cfg.root, "abort"), "w").close()   # ...which a crash leaves
    with open(os.path.join(s.cfg.config_dir, OFFSETS_FILE), "w") as f:
        f.write('{"offsetTable":{"T@g":{0:40,1:3}}}')   # queue 0: read 40, only 5 recovered
    r = stores(root)
    assert r.query_offset("g", "T", 0) == r.max_offset("T", 0) == 5
    assert r.query_offset("g", "T", 1) == 3


def test_queue_entries_past_a_hole_are_cut_after_a_crash(stores, tmp_path):
    """4. A cut keeps or drops each page of ConsumeQueue entries: entries of records the cut
    took could survive beyond a page of zeros, past the first empty entry that recovery
    took for the queue's end: the store kept ConsumeQueue entries past the recovered end of
    the CommitLog. Once the queue's new appends reached them, a restart would count them and
    serve whatever the log held at their offsets by then."""
    root = tmp_path / "live"
    s = stores(root)
    put_all(s, 20)                      # queue 0: offsets 0..9
    end = s.commit_pos
    cq = s.queues.get("T", 0)
    s.close()
    open(os.path.join(s.cfg.root, "abort"), "w").close()   # a crash
    stale = 10 + 4096 // 20 + 5         # past a zeroed page: a record the cut took
    mm = cq.map(stale // cq.per_file, create=True)
    ENTRY.pack_into(mm, (stale % cq.per_file) * ENTRY_SIZE, end + 100, 900, 0)
    mm.flush()
    r = stores(root)
    assert r.max_offset("T", 0) == 10
    assert r.queues.get("T", 0).entry(stale) is None
    for _ in range(30):                 # the log grows past the stale entry's position...
        r.put("T", 0, b"new|" + b"y" * 900)
    r.close()
    again = stores(root)                # ...and a clean start finds a consistent store
    assert again.max_offset("T", 0) == 40
    assert verify_store(again.cfg, again.commit_pos).ok
