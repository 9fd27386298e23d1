"""The owner's pre-touch of CommitLog files (CommitLog.prefault): the file from the given offset
is in the page cache afterwards (before it, only the kernel's read-around of the first fault:
read_ahead_kb / 2), and nothing is dirtied (a preallocated file is not written twice)."""
from __future__ import annotations

import os

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

