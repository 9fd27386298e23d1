"""SYNC_FLUSH: a put returns only once the flushed position covers it; concurrent putters
share msyncs (group commit); a flush that does not come in time is FLUSH_DISK_TIMEOUT."""
import threading
import time

import pytest

from shmq.errors import FlushDiskTimeout
from shmq.store import SYNC_FLUSH
from shmq.store.flush import C_ROUND_S


def test_sync_put_returns_after_its_flush(open_store):
    s = open_store(flush_disk_type=SYNC_FLUSH)
    for i in range(50):
        r = s.put("T", 0, b"x" * 100)
        assert s.flushed_pos >= r.end
    w = s.queue_writer("T", 1)
    w.put(b"y")
    assert s.flushed_pos >= s.commit_pos


def test_group_commit_with_eight_putters(open_store):
    s = open_store(flush_disk_type=SYNC_FLUSH, mapped_file_size_commitlog=1 << 20)
    before = s.cb.ctl.pos.flush_count
    errors = []

    def putter(q):
        try:
            w = s.queue_writer("T", q)
            for _ in range(200):
                w.put(b"z" * 1024)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=putter, args=(q,)) for q in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    flushes = s.cb.ctl.pos.flush_count - before
    assert s.flushed_pos >= s.commit_pos
    assert 0 < flushes < 1600, f"{flushes} msyncs for 1600 puts"


def test_flush_timeout_is_reported_with_the_result(open_store):
    s = open_store(flush_disk_type=SYNC_FLUSH, sync_flush_timeout_ms=200)
    s.flusher.stop()
    s.flusher = None
    with pytest.raises(FlushDiskTimeout) as ei:
        s.put("T", 0, b"stored but not confirmed")
    assert ei.value.code == 10
    assert ei.value.result.queue_offset == 0
    assert s.max_offset("T", 0) == 1  # it is stored


def test_async_flush_catches_up(open_store):
    s = open_store()
    s.put("T", 0, b"x")
    s.flush()
    assert s.flushed_pos == s.commit_pos


def test_group_commit_in_c_across_many_files(open_store):
    """The steady group commit runs in C (shmq_group_commit), one file at a time: the putters
    cross five 64 KiB CommitLog files, every put returns flushed, and the service's Python
    rounds are a small part of the flushes (the C loop flushes many times a round)."""
    s = open_store(flush_disk_type=SYNC_FLUSH)
    before, rounds, t0 = s.cb.ctl.pos.flush_count, s.flusher.rounds, time.monotonic()
    errors = []

    def putter(q):
        try:
            w = s.queue_writer("T", q)
            for _ in range(80):
                w.put(b"c" * 1000)
                assert s.flushed_pos >= w.out.end
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=putter, args=(q,)) for q in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors
    assert len(s.commitlog.file_indexes()) >= 5
    flushes, py_rounds = s.cb.ctl.pos.flush_count - before, s.flusher.rounds - rounds
    assert s.flushed_pos >= s.commit_pos
    # in Python every flush is a round; the C loop comes back once a file or once a C_ROUND_S
    files_crossed, seconds = len(s.commitlog.file_indexes()), time.monotonic() - t0
    assert py_rounds <= files_crossed + seconds / C_ROUND_S + 3 < flushes, \
        f"{flushes} flushes in {py_rounds} Python rounds ({files_crossed} files, {seconds:.1f} s)"


def test_c_group_commit_ends_at_stop(open_store):
    s = open_store(flush_disk_type=SYNC_FLUSH)
    s.put("T", 0, b"x")
    assert s.flusher.stop(timeout=5)  # the stop request ends the C loop (its budget is 1 s)
    s.flusher = None
