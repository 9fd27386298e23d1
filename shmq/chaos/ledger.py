"""The append-only files of a chaos run. A producer appends one line per acknowledged id
(``<id>``) after its send returned SEND_OK; a consumer one line per delivered message
(``<id>`` or ``G <id-or-?>`` for garbage). Each line goes out with one ``write(2)`` before
the next send, so it is in the page cache when the process is killed: a kill -9 of the
writer loses at most the line of the call it was in, which then counts as not acknowledged
(the check can only under-count acks, never invent one). ``fsync_every`` adds an fsync
per that many lines for a run that should also survive the host."""
from __future__ import annotations

import collections
import os
from pathlib import Path


class AppendLog:
    def __init__(self, path: str | os.PathLike, fsync_every: int = 0):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self.fsync_every = fsync_every
        self._n = 0

    def add(self, line: str) -> None:
        os.write(self.fd, line.encode() + b"\n")
        self._n += 1
        if self.fsync_every and self._n % self.fsync_every == 0:
            os.fsync(self.fd)

    def close(self) -> None:
        if self.fd >= 0:
            os.fsync(self.fd)
            os.close(self.fd)
            self.fd = -1


def read_lines(directory: str | os.PathLike, pattern: str = "*.log") -> list[str]:
    """Every complete line of every matching file (a line torn by a kill has no newline and
    is dropped: its write never finished, so it was never recorded)."""
    out: list[str] = []
    for f in sorted(Path(directory).glob(pattern)):
        data = f.read_bytes()
        end = data.rfind(b"\n")
        if end >= 0:
            out += data[:end].decode(errors="replace").split("\n")
    return out


def received(lines: list[str]) -> tuple[collections.Counter, int]:
    """From consumer lines: ids delivered (with counts) and the number of garbage deliveries."""
    got: collections.Counter = collections.Counter()
    garbage = 0
    for line in lines:
        if line.startswith("G "):
            garbage += 1
        elif line:
            got[line] += 1
    return got, garbage
