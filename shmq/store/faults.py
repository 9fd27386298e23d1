"""The one fault hook of the store: every durability or allocation call of the store passes
through ``hit`` (or ``errno_at``) just before it touches the disk, so a test can make that call
fail as a full disk or a failing disk would, in any process (broker supervisor, worker, local
producer), while the broker runs. The power-loss harness adds its durability trace here too.

Call sites (``point``: the call; ``what``, passed by every site, is the path of the file):

- ``preallocate``: posix_fallocate of a new CommitLog or timer-marks file
  (``files.create_preallocated``) and of a new IndexFile (``IndexFile.create``); the ftruncate
  of a new (sparse) ConsumeQueue file (``files.create_sparse``) and the allocation of its pages
  by recovery (``ConsumeQueue.write_entry``; the C append's own allocation, ``cq_reserve``,
  answers ENOSPC itself);
- ``write``: an atomic small-file write (``files.write_atomic``: topics.json,
  subscriptionGroup.json, consumerOffset.json, the checkpoint, ...), before its first byte;
- ``msync``: the flush of a mapped file: CommitLog (flush.py), ConsumeQueue
  (``ConsumeQueue.flush_range``, an fdatasync), IndexFile (``IndexFile.flush``).

Rules: ``ERRNO:POINT[:MATCH][:after=N][:count=M]``, several separated by commas or new lines,
e.g. ``enospc:preallocate:/commitlog/,eio:msync:/commitlog/:after=3``. ``ERRNO`` is an errno
name (``enospc``, ``eio``, ``edquot``, ...); ``MATCH`` a substring of the path (empty: every call
of the point; write directories with their slashes, ``/index/``, so a test directory's name
cannot match); ``after=N`` lets the first N matching calls pass; ``count=M`` fails M calls then
lets the rest pass. Counters are per process.

Activation, read by ``configure_from_env`` when a store is opened or attached:
``SHMQ_FAULTS=<rules>`` (fixed for the process's life), or ``SHMQ_FAULTS_FILE=<path>``: the
rules are the file's content, re-read when its mtime/size/inode change (one stat per hook
call, and the hooks sit on the slow paths only: allocation, small-file writes, flushes,
never an append). A missing or empty file means no faults, so a test makes the disk "full"
by writing the file and "free" again by removing it. Unset: ``ACTIVE`` is False and a hook
returns at its first line (the CommitLog flush loop tests ``faults.ACTIVE`` before calling in):
nothing is paid in production.

A malformed rule is refused with ValueError (at configure time for the env, and for the
file: logged once, then ignored until the file changes), never silently ignored.

The durability trace (for the power-loss harness, tests/powerloss) rides on the same call
sites: with ``SHMQ_DURABILITY_TRACE=<dir>`` set when this module is imported (read once;
``TRACING`` is a constant), each durability call also copies what it is about to make durable
into a shadow "disk image" under ``<dir>``: ``data/<dev>-<ino>`` holds each inode's durable
bytes (an inode, not a path: write-temp-then-rename moves data between names), ``<key>.size``
the size of a file created whole (posix_fallocate: journalled with its name), and
``dirs/<quoted path>.json`` each directory's last durable listing (name -> inode). The calls:
``msync_errno`` (a mapped range: the CommitLog), ``before_sync`` (a whole file that also has a
fault point), ``synced`` (a whole file, no fault point), ``dir_synced`` and ``created``.
Data is copied and listings taken BEFORE the call that makes them durable: what changes in
between is left to the harness's coin, so the shadow never claims more than the call made
durable. Concurrent reports from several processes are pwrites at the file's own offsets or
whole-file replaces, so they never tear each other; a failure of the trace is logged and
ignored (it must not change what the store does).
"""
from __future__ import annotations

import errno as _errno
import json
import logging
import os
import threading
import urllib.parse

log = logging.getLogger("shmq.store.faults")

POINTS = ("preallocate", "write", "msync")

#: the durability trace's directory (None: off), read once
TRACE_DIR = os.environ.get("SHMQ_DURABILITY_TRACE") or None
TRACING = TRACE_DIR is not None
#: False unless a fault source is configured or the trace is on: the call sites test it
#: before calling in.
ACTIVE = TRACING
#: what msync rounds to (and what a power loss tears at)
PAGE = os.sysconf("SC_PAGE_SIZE")
_COPY_CHUNK = 1 << 20

_lock = threading.Lock()
#: Called after every ``configure`` (no arguments): store/flush.py's C group commit makes its
#: msyncs without these hooks and must hand them back to the Python loop once a source is set
#: while a store runs (tests configure faults then).
on_configure: list = []
_rules: list["_Rule"] = []
_file: str | None = None
_file_key: tuple | None = None


class _Rule:
    __slots__ = ("err", "point", "match", "after", "count", "seen", "failed")

    def __init__(self, err: int, point: str, match: str, after: int, count: int | None):
        self.err, self.point, self.match = err, point, match
        self.after, self.count = after, count
        self.seen = 0     # matching calls so far
        self.failed = 0   # of which failed

    def fires(self, point: str, what: str) -> bool:
        if point != self.point or self.match not in what:
            return False
        self.seen += 1
        if self.seen <= self.after or (self.count is not None and self.failed >= self.count):
            return False
        self.failed += 1
        return True


def parse(text: str) -> list[_Rule]:
    """The rules of ``text`` (see the module doc); ValueError names the bad one."""
    rules = []
    for raw in text.replace("\n", ",").split(","):
        spec = raw.strip()
        if not spec or spec.startswith("#"):
            continue
        parts = spec.split(":")
        if len(parts) < 2:
            raise ValueError(f"fault rule {spec!r}: want ERRNO:POINT[:MATCH][:after=N][:count=M]")
        err = getattr(_errno, parts[0].upper(), None)
        if not isinstance(err, int):
            raise ValueError(f"fault rule {spec!r}: {parts[0]!r} is not an errno name")
        if parts[1] not in POINTS:
            raise ValueError(f"fault rule {spec!r}: point {parts[1]!r} is not one of {', '.join(POINTS)}")
        match, after, count = "", 0, None
        for p in parts[2:]:
            key, eq, val = p.partition("=")
            if eq and key in ("after", "count") and val.isdigit():
                if key == "after":
                    after = int(val)
                else:
                    count = int(val)
            elif eq:
                raise ValueError(f"fault rule {spec!r}: bad option {p!r}")
            else:
                match = p
        rules.append(_Rule(err, parts[1], match, after, count))
    return rules


def configure(rules: str | None = None, *, file: str | None = None) -> None:
    """Set the fault source of this process (tests in one process call it directly);
    ``configure()`` with neither turns faults off."""
    global ACTIVE, _rules, _file, _file_key
    parsed = parse(rules) if rules else []
    with _lock:
        _rules, _file, _file_key = parsed, file, None
        ACTIVE = bool(parsed) or file is not None or TRACING
    for fn in on_configure:
        fn()


def configure_from_env() -> None:
    """Read SHMQ_FAULTS / SHMQ_FAULTS_FILE (called when a store is opened or attached). An
    environment without them leaves a source set by ``configure`` alone."""
    rules, path = os.environ.get("SHMQ_FAULTS"), os.environ.get("SHMQ_FAULTS_FILE")
    if rules or path:
        configure(rules, file=os.path.abspath(path) if path else None)
        log.warning("fault injection is on (SHMQ_FAULTS=%r, SHMQ_FAULTS_FILE=%r)", rules, path)


def _reload_file_locked() -> None:
    global _rules, _file_key
    try:
        st = os.stat(_file)
        key = (st.st_mtime_ns, st.st_size, st.st_ino)
    except FileNotFoundError:
        key = None
    if key == _file_key:
        return
    _file_key = key
    text = ""
    if key is not None:
        try:
            with open(_file) as f:
                text = f.read()
        except OSError:
            text = ""
    try:
        _rules = parse(text)
    except ValueError as e:
        log.error("ignoring the fault file %s: %s", _file, e)
        _rules = []


def errno_at(point: str, what: str = "") -> int:
    """The errno the configured faults make the call ``point`` on ``what`` fail with, or 0
    (the call then goes ahead). For call sites that get an errno back (the C msync)."""
    if not ACTIVE:
        return 0
    with _lock:
        if _file is not None:
            _reload_file_locked()
        for r in _rules:
            if r.fires(point, what):
                log.warning("injected fault: %s on %s %s", _errno.errorcode.get(r.err, r.err), point, what)
                return r.err
    return 0


def hit(point: str, what: str = "") -> None:
    """Raise the OSError the configured faults make the call ``point`` on ``what`` fail with
    (as the real call would raise it); return at once when none does."""
    err = errno_at(point, what)
    if err:
        raise OSError(err, f"{os.strerror(err)} (injected by SHMQ_FAULTS)", what or None)


# ---- the durability trace (see the module doc) ---------------------------------------------------
def msync_errno(path: str, buf, off: int, n: int) -> int:
    """The CommitLog msync of ``n`` bytes at ``off`` of ``buf`` (the mapping of ``path``): the
    injected errno, or 0 after tracing the pages the msync will cover."""
    err = errno_at("msync", path)
    if not err and TRACING:
        lo = off - off % PAGE
        hi = min(len(buf), -(-(off + n) // PAGE) * PAGE)
        _trace_range(path, lo, buf[lo:hi])
    return err


def before_sync(point: str, path: str) -> None:
    """An fsync / fdatasync / msync of the whole of ``path`` is next: ``hit`` it, then trace it."""
    hit(point, path)
    if TRACING:
        _trace_file(path)


def synced(path: str) -> None:
    """A sync of the whole of ``path`` that has no fault point is next: trace it."""
    if TRACING:
        _trace_file(path)


def dir_synced(path: str) -> None:
    """An fsync of directory ``path`` is next: its entries, as listed now, become durable."""
    if not TRACING:
        return
    try:
        listing = {}
        with os.scandir(path) as it:
            for e in it:
                try:
                    listing[e.name] = _key(e.stat(follow_symlinks=False))
                except FileNotFoundError:
                    pass
        _replace(listing_path(TRACE_DIR, path), json.dumps(listing).encode())
    except Exception:
        _trace_failed("directory", path)


def created(path: str) -> None:
    """A file was created whole at ``path`` (allocated at its full size): its size is durable
    with its name; what an older inode with the same number left is forgotten."""
    if not TRACING:
        return
    try:
        st = os.stat(path)
        shadow = data_path(TRACE_DIR, st)
        try:
            os.unlink(shadow)
        except FileNotFoundError:
            pass
        _replace(shadow + ".size", str(st.st_size).encode())
    except Exception:
        _trace_failed("creation of", path)


def _trace_failed(what: str, path: str) -> None:
    """Say so, and leave ``<dir>/INCOMPLETE``: a shadow missing a report would make the harness
    blame the store for what the trace failed to record (a full disk, say)."""
    log.exception("durability trace: %s %s", what, path)
    try:
        with open(os.path.join(TRACE_DIR, "INCOMPLETE"), "a") as f:
            f.write(f"{what} {path}\n")
    except OSError:
        pass


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev:x}-{st.st_ino}"


def data_path(trace_dir: str, st: os.stat_result) -> str:
    return os.path.join(trace_dir, "data", _key(st))


def listing_path(trace_dir: str, directory: str) -> str:
    return os.path.join(trace_dir, "dirs", urllib.parse.quote(os.path.abspath(directory), safe="") + ".json")


def _replace(path: str, data: bytes) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = f"{path}.{os.getpid()}.{threading.get_ident()}"
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _trace_range(path: str, offset: int, data: bytes) -> None:
    try:
        shadow = data_path(TRACE_DIR, os.stat(path))
        os.makedirs(os.path.dirname(shadow), exist_ok=True)
        fd = os.open(shadow, os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            os.pwrite(fd, data, offset)
        finally:
            os.close(fd)
    except Exception:
        _trace_failed("range of", path)


def _trace_file(path: str) -> None:
    try:
        with open(path, "rb") as src:
            st = os.fstat(src.fileno())
            chunks = iter(lambda: src.read(_COPY_CHUNK), b"")
            _replace(data_path(TRACE_DIR, st), b"".join(chunks))
    except FileNotFoundError:
        pass
    except Exception:
        _trace_failed("file", path)
