"""The durability trace: a shadow "disk image" of what the store has made durable, for the
power-loss harness (tests/powerloss). Off unless ``SHMQ_DURABILITY_TRACE=<dir>`` is set when
this module is imported (read once: ``ON`` is a constant, so every call site costs one
global load and a branch when it is off).

Each durability call of the store reports here, at the call site, what it makes durable:

* ``synced_range(path, offset, data)``: bytes made durable by an msync of a mapped range;
* ``synced_file(path)``: the whole file, fsync / fdatasync of its descriptor (or an msync of
  its whole mapping);
* ``synced_dir(path)``: the directory's entries (an fsync of the directory);
* ``created(path)``: a file was created whole at ``path`` (its inode starts with no durable
  data; its size, allocated with posix_fallocate, is journalled with its name).

The shadow lives under ``<dir>``: ``data/<dev>-<ino>`` holds each inode's durable bytes (an
inode, not a path, because write-temp-then-rename moves data between names) and
``dirs/<quoted path>.json`` the last durable listing of each directory (name -> inode).
Data is copied BEFORE the sync call that makes it durable and listings are taken before the
directory fsync: whatever changes in between is left to the harness's coin (written back or
not), so the shadow never claims more than the call guaranteed.

Several processes (supervisor, workers, local clients) may report at once: every write is a
pwrite at the file's own offset or a whole-file replace, so concurrent reports never tear
each other. A failure of the trace itself is logged and ignored: it must never change what
the store does.
"""
from __future__ import annotations

import json
import logging
import os
import urllib.parse

log = logging.getLogger("shmq.store.durability_trace")

DIR = os.environ.get("SHMQ_DURABILITY_TRACE") or None
#: checked by every call site before calling in: False costs one branch on the hot path
ON = DIR is not None
_COPY_CHUNK = 1 << 20
#: what msync rounds to (and what a power loss tears at)
PAGE = os.sysconf("SC_PAGE_SIZE")


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev:x}-{st.st_ino}"


def data_path(trace_dir: str, st: os.stat_result) -> str:
    return os.path.join(trace_dir, "data", _key(st))


def listing_path(trace_dir: str, directory: str) -> str:
    name = urllib.parse.quote(os.path.abspath(directory), safe="")
    return os.path.join(trace_dir, "dirs", name + ".json")


def _shadow_fd(st: os.stat_result) -> int:
    d = os.path.join(DIR, "data")
    os.makedirs(d, exist_ok=True)
    return os.open(os.path.join(d, _key(st)), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)


def synced_range(path: str, offset: int, data) -> None:
    """``data`` (the mapped bytes about to be msynced) lands at ``offset`` of ``path``."""
    try:
        st = os.stat(path)
        fd = _shadow_fd(st)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
    except Exception:
        log.exception("durability trace: range of %s", path)


def synced_file(path: str) -> None:
    """The whole current content of ``path`` is about to be made durable."""
    try:
        src = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            st = os.fstat(src)
            d = os.path.join(DIR, "data")
            os.makedirs(d, exist_ok=True)
            tmp = os.path.join(d, f".{_key(st)}.{os.getpid()}")
            with open(tmp, "wb") as out:
                pos = 0
                while True:
                    chunk = os.pread(src, _COPY_CHUNK, pos)
                    if not chunk:
                        break
                    out.write(chunk)
                    pos += len(chunk)
            os.replace(tmp, data_path(DIR, st))
        finally:
            os.close(src)
    except Exception:
        log.exception("durability trace: file %s", path)


def synced_dir(path: str) -> None:
    """The entries of directory ``path`` (as listed now, before its fsync) are about to be durable."""
    try:
        listing = {}
        with os.scandir(path) as it:
            for e in it:
                try:
                    listing[e.name] = _key(e.stat(follow_symlinks=False))
                except FileNotFoundError:
                    pass
        out = listing_path(DIR, path)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        tmp = f"{out}.{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(listing, f)
        os.replace(tmp, out)
    except Exception:
        log.exception("durability trace: directory %s", path)


def created(path: str) -> None:
    """A file was created whole (allocated at its full size) at ``path``: its size is durable
    with its name (``<key>.size``); what an older inode with the same number left is forgotten."""
    try:
        st = os.stat(path)
        shadow = data_path(DIR, st)
        os.makedirs(os.path.dirname(shadow), exist_ok=True)
        try:
            os.unlink(shadow)
        except FileNotFoundError:
            pass
        with open(shadow + ".size", "w") as f:
            f.write(str(st.st_size))
    except Exception:
        log.exception("durability trace: creation of %s", path)
