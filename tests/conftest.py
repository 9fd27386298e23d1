"""Shared fixtures: temporary stores that always close and unlink their shared memory."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import posix_ipc
import pytest

from shmq.store import MessageStore, StoreConfig
from shmq.store.control import segment_name

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def small_config(root, **kw) -> StoreConfig:
    """Tiny files so tests roll over often: 64 KiB CommitLog files, 100-entry CQ files."""
    kw.setdefault("mapped_file_size_commitlog", 64 * 1024)
    kw.setdefault("cq_entries_per_file", 100)
    kw.setdefault("max_message_size", 16 * 1024)
    kw.setdefault("max_hash_slot_num", 1024)
    kw.setdefault("max_index_num", 4096)
    kw.setdefault("flush_interval_commitlog_ms", 50)
    kw.setdefault("flush_interval_consume_queue_ms", 100)
    # the test machine's disk is shared: its fill level must not expire a test's files
    kw.setdefault("disk_max_used_space_ratio", 100)
    return StoreConfig(root=str(root), **kw)


@pytest.fixture
def store_root(tmp_path):
    root = tmp_path / "store"
    yield root
    try:
        posix_ipc.unlink_shared_memory(segment_name(str(root)))
    except posix_ipc.ExistentialError:
        pass


@pytest.fixture
def open_store(store_root):
    """open_store(**config) -> an owner MessageStore on a fresh root, closed at teardown."""
    opened = []

    def _open(**kw):
        s = MessageStore.open(small_config(store_root, **kw))
        opened.append(s)
        return s

    yield _open
    for s in opened:
        s.close()


class Children:
    """Child processes of a test, killed by pid at teardown."""

    def __init__(self):
        self.procs: list[subprocess.Popen] = []

    def spawn(self, *args, **kw) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, *args], cwd=REPO, **kw)
        self.procs.append(p)
        return p

    def store_child(self, *args, **kw) -> subprocess.Popen:
        return self.spawn("-m", "tests.helpers.store_child", *map(str, args), **kw)

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()
            for f in (p.stdout, p.stderr, p.stdin):
                if f:
                    f.close()


@pytest.fixture
def children():
    c = Children()
    yield c
    c.cleanup()
