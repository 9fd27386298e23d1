"""Shared-memory segments left by killed owners: ``shmq store gc`` and a broker at start remove
those nobody can use (store directory gone, or owner provably dead and store unowned), never
one in use (owner alive, or a live process holding its append lock). Real processes, kill -9."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from shmq.native import lib
from shmq.store import MessageStore
from shmq.store.control import segment_name
from shmq.store.segment_gc import collect, gc_lock

from tests.conftest import REPO

pytestmark = pytest.mark.crash


def shm_exists(root) -> bool:
    return os.path.exists("/dev/shm/" + segment_name(str(root)).lstrip("/"))


def start_owner(children, root):
    p = children.store_child(root, "own", 64 * 1024, 100, 5, 1, stdout=subprocess.PIPE)
    line = p.stdout.readline()
    assert line.startswith(b"ready"), line
    return p


def remove_tree(path):
    """rmtree of a store whose owner still writes into it (a checkpoint's temp file can appear
    while the tree is walked): again until it is gone; once a directory is gone nothing is
    created in it any more."""
    for _ in range(100):
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.exists(path):
            return
        time.sleep(0.05)
    raise AssertionError(f"{path} could not be removed")


def kill9(p):
    os.kill(p.pid, signal.SIGKILL)
    p.wait()


def gc_cli(*args) -> str:
    r = subprocess.run([sys.executable, "-m", "shmq.cli.main", "store", "gc", *args], cwd=REPO,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture
def roots(tmp_path):
    made = []

    def make(name):
        made.append(tmp_path / name)
        return made[-1]
    yield make
    import posix_ipc
    for r in made:
        try:
            posix_ipc.unlink_shared_memory(segment_name(str(r)))
        except posix_ipc.ExistentialError:
            pass


def test_gc_and_broker_start_remove_segments_of_deleted_stores_only_when_the_owner_is_dead(children, roots, tmp_path):
    gone, alive_gone = roots("gone"), roots("alive-gone")
    dead = start_owner(children, gone)
    live = start_owner(children, alive_gone)
    remove_tree(gone)  # its owner may still checkpoint into it until the kill below
    remove_tree(alive_gone)  # its owner still runs on a deleted directory: in use
    assert shm_exists(gone) and shm_exists(alive_gone)
    # Every broker starting on this host removes such orphans too: holding the host's gc lock
    # from the kill to the checks keeps another test's broker start-up gc out of between.
    with gc_lock():
        kill9(dead)
        found = {seg.root: seg for seg in collect(under=str(tmp_path), dry_run=True)}
        assert found[str(gone)].action == "removable" and shm_exists(gone)
        assert found[str(alive_gone)].action == "kept"
        found = {seg.root: seg for seg in collect(under=str(tmp_path))}
        # (the directory is gone; an owner killed mid-checkpoint may have re-created a bare one)
        assert found[str(gone)].action == "removed" and found[str(gone)].why in (
            "store directory gone, owner dead", "no store at that path, owner dead")
        assert not shm_exists(gone)
    out = gc_cli("--under", str(tmp_path))
    assert shm_exists(alive_gone), out
    assert "in use: its owner is alive" in out and "1 segments, 0 removed, 1 in use" in out
    kill9(live)
    found = {seg.root: seg for seg in collect(under=str(tmp_path))}
    assert found.get(str(alive_gone)) is None or found[str(alive_gone)].action == "removed"
    assert not shm_exists(alive_gone)
    # In the same test, not a parallel one: a broker's start-up gc is not limited to a
    # directory and would race the checks above.
    _broker_at_start_removes_orphans(children, roots, tmp_path)


def test_gc_fences_a_dead_owners_existing_store_and_the_data_stays(children, roots, tmp_path):
    root = roots("exists")
    kill9(start_owner(children, root))
    assert shm_exists(root)
    out = gc_cli("--missing-only", "--under", str(tmp_path))
    assert shm_exists(root), out  # what a broker does at start: leave an existing store to its owner
    out = gc_cli("--under", str(tmp_path))
    assert not shm_exists(root), out
    s = MessageStore.open(__import__("tests.conftest", fromlist=["small_config"]).small_config(root))
    try:
        assert s.max_offset("T", 0) == 5  # the owner's 5 messages are all there
    finally:
        s.close()


def test_gc_never_removes_a_segment_whose_append_lock_a_live_process_holds(children, roots, tmp_path):
    root = roots("held")
    owner = start_owner(children, root)
    holder = children.store_child(root, "hold", lib.SHMQ_FP_MID_RECORD, "h", stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == b"holding"
    time.sleep(0.1)
    kill9(owner)
    found = {s.root: s for s in collect(under=str(tmp_path))}
    assert found[str(root)].action == "kept" and "in use" in found[str(root)].why
    assert shm_exists(root)
    kill9(holder)
    found = {s.root: s for s in collect(under=str(tmp_path))}
    assert found[str(root)].action == "removed"
    assert not shm_exists(root)


def _broker_at_start_removes_orphans(children, roots, tmp_path):
    orphan = roots("orphan")
    with gc_lock():
        kill9(start_owner(children, orphan))
        shutil.rmtree(orphan)
        assert shm_exists(orphan)
    store = tmp_path / "broker-store"
    p = subprocess.Popen([sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(store),
                          "--workers", "1", "--set", "diskMaxUsedSpaceRatio=99", "--set", "segmentGcOnStart=true",
                          "--set", "mappedFileSizeCommitLog=1048576"],
                         cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    children.procs.append(p)
    try:
        assert b"listening" in p.stdout.readline()
        deadline = time.monotonic() + 20
        while shm_exists(orphan):
            assert time.monotonic() < deadline, "the broker left the orphan segment"
            time.sleep(0.1)
        assert shm_exists(store)  # its own, of course, stays
    finally:
        p.send_signal(signal.SIGTERM)
        p.wait(30)
