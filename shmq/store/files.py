"""File primitives shared by the store: preallocated and sparse creation, atomic replacement, mapping.

Rules (what a crash or power loss may leave behind decides them): CommitLog, IndexFile and
timer files are created whole with posix_fallocate (a full disk is ENOSPC at creation, not
SIGBUS inside an append). ConsumeQueue files are created sparse (``create_sparse``: their full
size by ftruncate, no block allocated), because a queue holds 20 bytes an entry and a store
has thousands of queues: fully allocated, 10,000 queues took 60 GB before one message. A
store into a hole of a shared mapping allocates at the page fault and, on a full disk, kills
the writer with SIGBUS, so nothing writes a ConsumeQueue page through a mapping before it is
allocated by a write(2), which answers ENOSPC instead: the C append reserves the pages ahead
of its entries (``cq_reserve`` in native/core_private.h, under the append lock, zeros only past the
last published entry), recovery and a slave's replica writer use ``ConsumeQueue.write_entry``
(allocates by writing back the bytes already there). A file appears under its final name only
once complete (link(2) from a temp name, so two creators never clobber each other); permissions are set with fchmod
so no umask weakens them; small files (checkpoint, JSON config) are replaced by write temp +
fsync + rename + fsync of the directory; mapped files are never truncated, only unlinked whole.
"""
from __future__ import annotations

import errno
import grp
import mmap
import os
import tempfile
import threading

from shmq.errors import DiskFull, StoreError

from . import faults


def _apply_mode(fd: int, mode: int, group: str | None) -> None:
    os.fchmod(fd, mode)
    if group is not None:
        os.fchown(fd, -1, grp.getgrnam(group).gr_gid)


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        faults.dir_synced(path)
        os.fsync(fd)
    finally:
        os.close(fd)


def make_names_durable(path: str, root: str) -> None:
    """fsync every directory from ``path``'s own up to ``root``: the name of ``path`` and of each
    directory created on the way survive a power cut. fsync(2) of a file does not make its
    directory entry durable (its man page), and a mapped file whose name is lost is lost whole,
    however well its pages were synced. Called once per new file, off the send path."""
    d = os.path.dirname(os.path.abspath(path))
    root = os.path.abspath(root)
    while True:
        fsync_dir(d)
        parent = os.path.dirname(d)
        if d == root or not d.startswith(root) or parent == d:
            return
        d = parent


def dir_mode(file_mode: int) -> int:
    """The directory mode that goes with a file mode: whoever may read a file may enter its
    directory (0600 -> 0700, 0660 -> 0770)."""
    return file_mode | ((file_mode & 0o444) >> 2)


def ensure_dir(path: str, mode: int = 0o700, group: str | None = None) -> None:
    """Create ``path`` and any missing parents with exactly ``mode`` (and ``group``): makedirs
    alone leaves parents to the umask, which may open them to everyone."""
    missing = []
    p = os.path.abspath(path)
    while not os.path.isdir(p):
        missing.append(p)
        parent = os.path.dirname(p)
        if parent == p:
            break
        p = parent
    os.makedirs(path, mode=mode, exist_ok=True)
    for d in missing:
        os.chmod(d, mode)
        if group is not None:
            os.chown(d, -1, grp.getgrnam(group).gr_gid)


_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
#: madvise advice to fault a mapping's pages in at once (Linux 5.14 UAPI values; Python 3.12 names
#: them): READ maps them (the CommitLog's pre-touch), WRITE maps them writable (the index's slots)
MADV_POPULATE_READ = getattr(mmap, "MADV_POPULATE_READ", 22)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


def _create_whole(path: str, size: int, mode: int, group: str | None, size_it) -> bool:
    """Create ``path`` under a temporary name, give it its size with ``size_it(fd)``, then
    link it into place, so no reader ever sees it half-made. Returns False when another
    process created it first (the existing file is left alone); a full disk is DiskFull."""
    if os.path.exists(path):
        return False
    d = os.path.dirname(path)
    ensure_dir(d, dir_mode(mode), group)
    fd, tmp = tempfile.mkstemp(prefix=".new-", dir=d)
    try:
        _apply_mode(fd, mode, group)
        try:
            faults.hit("preallocate", path)
            size_it(fd)
        except OSError as e:
            if e.errno in _FULL:
                raise DiskFull.at(path, size, e.strerror) from e
            raise
        try:
            os.link(tmp, path)
            faults.created(path)  # its size goes with its name
            return True
        except FileExistsError:
            return False
    finally:
        os.close(fd)
        os.unlink(tmp)


def create_preallocated(path: str, size: int, mode: int = 0o600, group: str | None = None) -> bool:
    """Create ``path`` with ``size`` bytes allocated, zero-filled. Returns False when another
    process created it first (the existing file is left alone)."""
    def allocate(fd: int) -> None:
        try:
            os.posix_fallocate(fd, 0, size)
        except OSError as e:
            if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL):
                raise
            _write_zeros(fd, size)  # a filesystem without fallocate (tmpfs on old kernels)
    return _create_whole(path, size, mode, group, allocate)


def _write_zeros(fd: int, size: int) -> None:
    """Allocate by writing zeros: a sparse file (ftruncate) would be allocated at the page
    fault of a store through the mapping, and a full disk would then be SIGBUS in an append."""
    chunk = bytes(min(size, 1 << 20))
    done = 0
    while done < size:
        done += os.pwrite(fd, chunk[:size - done], done)


def create_sparse(path: str, size: int, mode: int = 0o600, group: str | None = None) -> bool:
    """Create ``path`` of ``size`` bytes with no block allocated (reads see zeros). Returns
    False when another process created it first. Whoever writes it through a mapping must
    allocate each page with write(2) first (see the rules above)."""
    return _create_whole(path, size, mode, group, lambda fd: os.ftruncate(fd, size))


def write_atomic(path: str, data: bytes, mode: int = 0o600, group: str | None = None) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content."""
    d = os.path.dirname(path)
    ensure_dir(d, dir_mode(mode), group)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=d)
    try:
        _apply_mode(fd, mode, group)
        faults.hit("write", path)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        faults.synced(tmp)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(d)


def map_file(path: str, size: int, *, writable: bool = True) -> mmap.mmap:
    """Map a whole file shared. Refuses a file of the wrong size (a mapping past its end
    would SIGBUS on access)."""
    flags = os.O_RDWR if writable else os.O_RDONLY
    fd = os.open(path, flags | os.O_CLOEXEC)
    try:
        actual = os.fstat(fd).st_size
        if actual != size:
            raise StoreError(f"{path} is {actual} bytes, expected {size}")
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        return mmap.mmap(fd, size, mmap.MAP_SHARED, prot)
    finally:
        os.close(fd)


def name_of(offset: int) -> str:
    """File name of a CommitLog / ConsumeQueue file: its start offset, 20 digits."""
    return f"{offset:020d}"


def list_numbered(directory: str) -> list[int]:
    """Start offsets of the files named by offset in ``directory``, ascending."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return []
    return sorted(int(n) for n in names if len(n) == 20 and n.isdigit())


class MappedSet:
    """The files of one kind a process has mapped, by index. A memoryview a reader holds keeps
    its mapping alive by itself, so forgetting or deleting a file never pulls memory from under
    a reader; files are unlinked whole, never truncated."""

    def __init__(self):
        self._maps: dict[int, mmap.mmap] = {}
        self._views: dict[int, memoryview] = {}   # one whole-file view per mapping, sliced by readers
        self._lock = threading.Lock()

    def path(self, index: int) -> str:  # pragma: no cover - each kind names its files
        raise NotImplementedError

    def forget(self, index: int) -> None:
        """Drop our mapping of a file (readers holding views keep theirs)."""
        with self._lock:
            self._maps.pop(index, None)
            self._views.pop(index, None)

    def delete_file(self, index: int) -> None:
        self.forget(index)
        try:
            os.unlink(self.path(index))
        except FileNotFoundError:
            pass

    def close(self) -> None:
        with self._lock:
            maps, self._maps = self._maps, {}
            views, self._views = self._views, {}
        for v in views.values():
            v.release()  # slices readers hold stay valid: they keep the mapping themselves
        for mm in maps.values():
            try:
                mm.close()
            except BufferError:
                pass  # a reader still holds a view: the mapping goes when the view does
