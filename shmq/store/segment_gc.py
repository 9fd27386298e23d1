"""Removing shared-memory control blocks nobody can use any more (``shmq store gc``).

A broker killed with SIGKILL leaves its segment in /dev/shm (its clean shutdown unlinks it).
Most of the time its next start on the same store fences and replaces it; but when the store
directory was removed, nothing ever will, and the segment stays until reboot. This module
finds shmq segments (``/shmq.<sha1 of the store path>`` whose header carries shmq's magic and
this build's layout) and removes those nobody can use:

* the store directory is gone and the owner is provably dead (``shmq_pid_alive``: ESRCH, a
  zombie, or another start time) -> unlinked;
* the store directory exists (only with ``existing=True``): the store's flock is taken
  (held: a broker owns it, keep), the owner must be provably dead, then the segment is fenced
  exactly as a broker start fences it (a dead append-lock holder is repaired; a live one,
  e.g. a stopped local producer, means in use: keep) and unlinked.

Never removed: a segment whose owner is alive (even on a deleted directory), one that is not
shmq's or of another layout, one of another user (no permission).

Why a broker runs only the first kind at start: taking another store's flock, even for an
instant, could make that store's own broker fail to start at the same moment; a store that
still exists is fenced by its own next broker start anyway.
"""
from __future__ import annotations

import fcntl
import logging
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass

from shmq.errors import StoreError, StoreLocked
from shmq.native import ffi, lib

from .config import StoreConfig
from .control import segment_name

log = logging.getLogger("shmq.store.gc")

SHM_DIR = "/dev/shm"


@dataclass
class Segment:
    name: str          # "/shmq.<digest>"
    root: str          # the store it belongs to ("" if unreadable)
    owner_pid: int
    action: str        # "removed", "kept" or "skipped"
    why: str

    def line(self) -> str:
        return f"{self.action} {self.name} store={self.root or '?'} owner={self.owner_pid}: {self.why}"


def _read_header(path: str) -> tuple[str, int, bool] | None:
    """(store root, owner pid, owner provably dead) of a shmq segment of this layout, else None."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        # a copy of the header (no mapping: nothing of ours stays attached to the segment)
        data = bytearray(os.pread(fd, lib.SHMQ_QUEUE_TABLE_OFFSET, 0))
    finally:
        os.close(fd)
    if len(data) < lib.SHMQ_QUEUE_TABLE_OFFSET:
        return None
    ctl = ffi.cast("shmq_ctl *", ffi.from_buffer(data))
    h = ctl.header
    if (h.magic != lib.SHMQ_CTL_MAGIC or h.layout_version != lib.SHMQ_LAYOUT_VERSION
            or h.fingerprint != lib.shmq_layout_fingerprint()):
        return None
    root = ffi.string(ctl.root, lib.SHMQ_ROOT_MAX).decode(errors="replace")
    o = ctl.owner
    dead = not lib.shmq_pid_alive((o.pid << 32) | (o.starttime & 0xFFFFFFFF))
    return root, o.pid, dead


def _unlink(name: str) -> None:
    import posix_ipc
    try:
        posix_ipc.unlink_shared_memory(name)
    except posix_ipc.ExistentialError:
        pass


def _collect_existing(seg: Segment, dry_run: bool) -> None:
    from .ownership import fence_previous
    try:
        lock_fd = os.open(os.path.join(seg.root, "lock"), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        lock_fd = None
    except OSError as e:
        seg.action, seg.why = "skipped", f"cannot open the store's lock file: {e.strerror}"
        return
    try:
        if lock_fd is not None:
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                seg.why = "in use: a broker holds the store's lock"
                return
        try:
            with open(os.path.join(seg.root, "nonce")) as f:
                nonce = int(f.read().strip(), 16)
        except FileNotFoundError:
            # the directory is there (re-created, or another one) but it is no store: nobody
            # can attach through this segment
            if not dry_run:
                _unlink(seg.name)
            seg.action, seg.why = ("removable" if dry_run else "removed"), "no store at that path, owner dead"
            return
        if dry_run:
            seg.action, seg.why = "removable", "owner dead, store unowned"
            return
        # the same fencing a broker start does: a dead append-lock holder's append is
        # repaired; a live holder (a stopped local writer) keeps it
        fence_previous(StoreConfig(root=seg.root, lock_timeout_ms=1000), nonce)
        seg.action, seg.why = "removed", "owner dead, store unowned (fenced)"
    except StoreLocked as e:
        seg.why = f"in use: {e}"
    except (OSError, ValueError, StoreError) as e:
        seg.action, seg.why = "skipped", f"{type(e).__name__}: {e}"
    finally:
        if lock_fd is not None:
            os.close(lock_fd)


_held = threading.local()


@contextmanager
def gc_lock(shm_dir: str = SHM_DIR):
    """One collection at a time on this host: every ``collect`` (a broker's start, ``shmq store
    gc``) runs under an flock of ``<shm_dir>/shmq-gc.lock``, so two never judge the same
    segment at once. Re-entrant within a thread; the lock file holds nothing."""
    if getattr(_held, "depth", 0):
        _held.depth += 1
        try:
            yield
        finally:
            _held.depth -= 1
        return
    fd = os.open(os.path.join(shm_dir, "shmq-gc.lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        _held.depth = 1
        try:
            yield
        finally:
            _held.depth = 0
    finally:
        os.close(fd)  # releases the flock


def collect(*, existing: bool = True, under: str | None = None, dry_run: bool = False,
            shm_dir: str = SHM_DIR) -> list[Segment]:
    """Examine every shmq segment (of stores under ``under``, if given) and remove the unusable
    ones (see the module text). Returns what was found and done, one entry per segment."""
    if not os.path.isdir(shm_dir):
        return []
    with gc_lock(shm_dir):
        return _collect(existing, under, dry_run, shm_dir)


def _collect(existing: bool, under: str | None, dry_run: bool, shm_dir: str) -> list[Segment]:
    under = os.path.abspath(under) + os.sep if under else None
    out: list[Segment] = []
    try:
        names = sorted(n for n in os.listdir(shm_dir) if n.startswith("shmq.") and not n.endswith(".lock"))
    except FileNotFoundError:
        return out
    for n in names:
        name = "/" + n
        try:
            hdr = _read_header(os.path.join(shm_dir, n))
        except OSError as e:
            if under is None:
                out.append(Segment(name, "", 0, "skipped", f"unreadable: {e.strerror}"))
            continue
        if hdr is None:
            if under is None:
                out.append(Segment(name, "", 0, "skipped", "not a control block of this shmq build"))
            continue
        root, pid, dead = hdr
        if under is not None and not (root + os.sep).startswith(under):
            continue
        seg = Segment(name, root, pid, "kept", "")
        out.append(seg)
        if segment_name(root) != name:
            seg.action, seg.why = "skipped", "its name is not its store's (not made by shmq)"
        elif not dead:
            seg.why = "in use: its owner is alive"
        elif not os.path.isdir(root):
            if not dry_run:
                _unlink(name)
            seg.action, seg.why = ("removable" if dry_run else "removed"), "store directory gone, owner dead"
        elif existing:
            _collect_existing(seg, dry_run)
        else:
            seg.why = "owner dead, store exists: its next broker start fences it"
        if seg.action == "removed":
            log.info("%s", seg.line())
    return out
