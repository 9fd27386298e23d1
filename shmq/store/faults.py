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
"""
from __future__ import annotations

import errno as _errno
import logging
import os
import threading

log = logging.getLogger("shmq.store.faults")

POINTS = ("preallocate", "write", "msync")

#: False unless a fault source is configured (the hooks return at once then).
ACTIVE = False

_lock = threading.Lock()
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
        ACTIVE = bool(parsed) or file is not None


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
