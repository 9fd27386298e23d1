"""store/checkpoint: how far each kind of file is known to be on disk, as offsets.

    off  width  field
      0    4    magic "SQCP"
      4    4    version (1)
      8    8    log_flushed     every CommitLog byte below is on disk
     16    8    cq_flushed      every record below has its ConsumeQueue entry on disk
     24    8    index_flushed   every record below is in the index files on disk
     32    8    written_at      ms, for people
     40    4    crc32 of bytes 0..40

Offsets, not timestamps (RocketMQ's timestamps made recovery start too late, #678, #10073).
Written whole to a temp file, fsynced, renamed and the directory fsynced; a missing or
damaged checkpoint reads as all zeros, which only makes recovery scan more.
"""
from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import dataclass

from . import files

_LAYOUT = struct.Struct("<4sIqqqq")
_MAGIC = b"SQCP"


@dataclass
class Checkpoint:
    log_flushed: int = 0
    cq_flushed: int = 0
    index_flushed: int = 0

    @classmethod
    def load(cls, path: str) -> "Checkpoint":
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            return cls()
        if len(raw) != _LAYOUT.size + 4 or zlib.crc32(raw[:-4]) != struct.unpack("<I", raw[-4:])[0]:
            return cls()
        magic, version, log, cq, index, _ = _LAYOUT.unpack(raw[:-4])
        if magic != _MAGIC or version != 1:
            return cls()
        return cls(log, cq, index)

    def store(self, path: str) -> None:
        body = _LAYOUT.pack(_MAGIC, 1, self.log_flushed, self.cq_flushed, self.index_flushed,
                            int(time.time() * 1000))
        files.write_atomic(path, body + struct.pack("<I", zlib.crc32(body)))


def path_of(root: str) -> str:
    return os.path.join(root, "checkpoint")
