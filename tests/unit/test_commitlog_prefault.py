"""The owner's pre-touch of CommitLog files (CommitLog.prefault -> shmq_prefault): the file
from the given offset is in the page cache afterwards (before it, only the kernel's read-around
of the first fault: read_ahead_kb / 2), nothing is dirtied (a preallocated file is not written
twice), and the owner's other threads run while it works."""
from __future__ import annotations

import os
import threading
import time

from shmq.bench.pagecache import resident_bytes
from shmq.store.commitlog import CommitLog
from shmq.store.config import StoreConfig

MIB = 1 << 20


def test_prefault_brings_the_file_from_start_in_and_dirties_nothing(tmp_path):
    size, start = 32 * MIB, 24 * MIB
    log = CommitLog(StoreConfig(root=str(tmp_path), mapped_file_size_commitlog=size))
    log.prefault(0, start + 100)              # from the page holding offset start + 100
    path = log.path(0)
    assert os.path.getsize(path) == size and os.stat(path).st_blocks * 512 >= size
    before = resident_bytes(path, start)
    assert resident_bytes(path) - before == size - start
    assert before < start
    log.prefault(1)                            # a file not made yet is created whole first
    assert resident_bytes(log.path(1)) == size
    log.close()
    # clean pages go at once when dropped, dirty ones would be written back first: the
    # pre-touch wrote nothing (no zeros ahead of the records)
    for i in (0, 1):
        fd = os.open(log.path(i), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
        assert resident_bytes(log.path(i)) == 0
        with open(log.path(i), "rb") as f:
            assert f.read() == bytes(size)


def test_other_threads_run_while_a_file_is_pre_touched(tmp_path):
    """A ticker thread sleeping 1 ms at a time: while the pre-touch of a fresh 256 MiB file runs
    (40-400 ms here), its longest wait is a small part of the call. With the GIL held through
    the call (Python's mmap.madvise did that), it waited for the whole call every time."""
    size = 256 * MIB
    log = CommitLog(StoreConfig(root=str(tmp_path), mapped_file_size_commitlog=size))
    ticks, stop = [], threading.Event()

    def tick():
        while not stop.is_set():
            ticks.append(time.monotonic())
            time.sleep(0.001)
    t = threading.Thread(target=tick, daemon=True)
    t.start()
    rounds = []
    try:
        for i in range(3):
            log.create(i)
            log.map(i)
            time.sleep(0.02)
            t0 = time.monotonic()
            log.prefault(i)
            t1 = time.monotonic()
            inside = [t0] + [x for x in ticks if t0 < x < t1] + [t1]
            rounds.append((t1 - t0, max(b - a for a, b in zip(inside, inside[1:]))))
            log.delete(i)
    finally:
        stop.set()
        t.join()
        log.close()
    assert any(call >= 0.02 and gap < call / 2 for call, gap in rounds), rounds
