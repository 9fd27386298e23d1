"""How much of a set of files is in the page cache (mincore), and dropping just those files
from it (fsync, then posix_fadvise(POSIX_FADV_DONTNEED)).

Why fadvise and not ``echo 1 > /proc/sys/vm/drop_caches``: it needs no root and touches only
our files, not the page cache of everything else on a shared machine. Its limit is the
kernel's: a page that is dirty, under writeback or mapped into some process's page tables is
not dropped, so the files are fsynced first and every process that mapped them (the broker)
must have exited or unmapped them; ``resident_bytes`` says what actually stayed.
"""
from __future__ import annotations

import ctypes
import mmap
import os

_PAGE = mmap.PAGESIZE
_libc = None


def _lib():
    global _libc
    if _libc is None:
        lib = ctypes.CDLL(None, use_errno=True)
        lib.mmap.restype = ctypes.c_void_p
        lib.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
        lib.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
        lib.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p)
        _libc = lib
    return _libc


def files_under(*dirs: str) -> list[str]:
    out = []
    for d in dirs:
        for root, _, names in os.walk(d):
            out += [os.path.join(root, n) for n in sorted(names)]
    return [p for p in out if os.path.isfile(p)]


def resident_bytes(path: str, length: int | None = None) -> int:
    """Bytes of ``path`` (its first ``length``) in the page cache now (a read-only mapping,
    never touched: mapping it brings nothing in)."""
    size = os.path.getsize(path) if length is None else min(length, os.path.getsize(path))
    if size <= 0:
        return 0
    lib = _lib()
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = lib.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap {path}")
        try:
            pages = (size + _PAGE - 1) // _PAGE
            vec = ctypes.create_string_buffer(pages)
            if lib.mincore(addr, size, vec) != 0:
                raise OSError(ctypes.get_errno(), f"mincore {path}")
            return sum(b & 1 for b in vec.raw) * _PAGE
        finally:
            lib.munmap(addr, size)
    finally:
        os.close(fd)


def resident_total(paths: list[str]) -> tuple[int, int]:
    """(bytes in the page cache, bytes of the files) over ``paths``."""
    res = size = 0
    for p in paths:
        try:
            res += resident_bytes(p)
            size += os.path.getsize(p)
        except FileNotFoundError:
            pass
    return res, size


def drop(paths: list[str]) -> None:
    """Write each file's dirty pages, then ask the kernel to drop its cached pages."""
    for p in paths:
        try:
            fd = os.open(p, os.O_RDONLY)
        except FileNotFoundError:
            continue
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
