"""The store API under the fault hook, in one process (the broker tests cover the wire): what a
put raises when the disk is full or a flush failed, and that the flush thread neither stops nor
floods the log while the disk is full."""
from __future__ import annotations

import logging
import time

import pytest

from shmq.errors import DiskFull, FlushDiskTimeout, FlushFailed, StoreReadOnly
from shmq.store import faults
from shmq.store.config import SYNC_FLUSH


@pytest.fixture(autouse=True)
def _off_after():
    yield
    faults.configure()


def test_sync_put_on_a_failed_flush_raises_flush_failed_with_its_result(open_store):
    s = open_store(flush_disk_type=SYNC_FLUSH)
    s.put("T", 0, b"kept")
    faults.configure("eio:msync:/commitlog/")
    with pytest.raises(FlushFailed) as e:
        s.put("T", 0, b"not confirmed")
    assert isinstance(e.value, FlushDiskTimeout) and e.value.code == 10
    assert e.value.result is not None and e.value.result.queue_offset == 1
    with pytest.raises(StoreReadOnly) as ro:
        s.queue_writer("T", 0).put(b"refused", b"")
    assert ro.value.code == 14 and "read-only" in ro.value.remark
    assert s.cb.ctl.pos.io_error == 5


def test_sync_queue_writer_on_a_failed_flush_raises_flush_failed(open_store):
    """The local producers' path (QueueWriter) answers as the store's put does."""
    s = open_store(flush_disk_type=SYNC_FLUSH)
    qw = s.queue_writer("T", 0)
    qw.put(b"kept", b"")
    faults.configure("eio:msync:/commitlog/")
    with pytest.raises(FlushFailed):
        qw.put(b"not confirmed", b"")
    with pytest.raises(StoreReadOnly):
        qw.put(b"refused", b"")


def test_full_disk_keeps_the_flush_thread_flushing_and_says_so_once(open_store, caplog):
    s = open_store()                         # 64 KiB CommitLog files
    faults.configure("enospc:preallocate:/commitlog/")
    caplog.set_level(logging.ERROR, logger="shmq.store.flush")
    stored = 0
    with pytest.raises(DiskFull):
        for i in range(1000):
            s.put("T", 0, b"x" * 1000)
            stored += 1
    deadline = time.monotonic() + 5
    while s.flushed_pos < s.commit_pos and time.monotonic() < deadline:
        time.sleep(0.01)
    assert s.flushed_pos == s.commit_pos     # the flush thread still flushes
    s.flush()                                # ConsumeQueues and the checkpoint too
    assert s.checkpoint.log_flushed == s.commit_pos
    # the flush's queue thread prepares files ahead every 100 ms: said at its next round
    while not any("preallocation held back" in r.getMessage() for r in caplog.records) \
            and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [r.getMessage() for r in caplog.records].count(
        next(r.getMessage() for r in caplog.records if "preallocation held back" in r.getMessage())) == 1
    faults.configure()
    s.put("T", 0, b"after")
    assert s.queues.get("T", 0).last_offset() == stored + 1
