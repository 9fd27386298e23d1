"""store/checkpoint: how far each kind of file is known to be on disk, as offsets.

The file is one 4 KiB page laid out so that Apache RocketMQ's broker can open an shmq store
(and shmq a RocketMQ store). RocketMQ 4.x's StoreCheckpoint maps the first page and reads three
big-endian longs at 0, 8 and 16 (5.x adds two more at 24 and 32); shmq's own offsets live
further on, where RocketMQ never reads or writes:

    off  width  field
      0    8    physicMsgTimestamp   RocketMQ's; shmq writes 0
      8    8    logicsMsgTimestamp   RocketMQ's; shmq writes 0
     16    8    indexMsgTimestamp    RocketMQ's; shmq writes 0
     64    4    magic "SQCP"
     68    4    version (2)
     72    8    log_flushed          every CommitLog byte below is on disk
     80    8    cq_flushed           every record below has its ConsumeQueue entry on disk
     88    8    index_flushed        every record below is in the index files on disk
     96    8    written_at           ms, for people
    104    4    crc32 of bytes 0..104 (RocketMQ's fields included)
    ...         zeros to 4096

Offsets, not timestamps (RocketMQ's timestamps made recovery start too late, #678, #10073).
The zero timestamps make RocketMQ, should it open an shmq store after a crash, recover from the
first CommitLog file and rebuild its index (slow, never wrong); after a clean shutdown it does
not read them. When RocketMQ has written the file since (its timestamps are there), the CRC no
longer matches and shmq's offsets are not trusted: a checkpoint that does not verify reads as
all zeros, which only makes recovery scan more. Version 1 (44 bytes, the block at offset 0)
is still read.

Written whole to a temp file, fsynced, renamed and the directory fsynced.
"""
from __future__ import annotations

import os
import struct
import time
import zlib
from dataclasses import dataclass

from . import files

PAGE = 4096
_ROCKETMQ = struct.Struct(">qqq")       # the three timestamps, at 0
_BLOCK_AT = 64
_BLOCK = struct.Struct("<4sIqqqq")
_MAGIC = b"SQCP"
_V1_SIZE = _BLOCK.size + 4


@dataclass
class Checkpoint:
    log_flushed: int = 0
    cq_flushed: int = 0
    index_flushed: int = 0

    @classmethod
    def load(cls, path: str) -> "Checkpoint":
        try:
            with open(path, "rb") as f:
                raw = f.read(PAGE)
        except FileNotFoundError:
            return cls()
        if len(raw) == _V1_SIZE:
            return cls._verified(raw[:_BLOCK.size], raw[_BLOCK.size:], 0, 1)
        end = _BLOCK_AT + _BLOCK.size
        if len(raw) < end + 4:
            return cls()
        return cls._verified(raw[:end], raw[end:end + 4], _BLOCK_AT, 2)

    @classmethod
    def _verified(cls, covered: bytes, crc: bytes, at: int, version: int) -> "Checkpoint":
        if zlib.crc32(covered) != struct.unpack("<I", crc)[0]:
            return cls()
        magic, v, log, cq, index, _ = _BLOCK.unpack_from(covered, at)
        if magic != _MAGIC or v != version:
            return cls()
        return cls(log, cq, index)

    def store(self, path: str) -> None:
        page = bytearray(PAGE)
        _ROCKETMQ.pack_into(page, 0, 0, 0, 0)
        _BLOCK.pack_into(page, _BLOCK_AT, _MAGIC, 2, self.log_flushed, self.cq_flushed,
                         self.index_flushed, int(time.time() * 1000))
        end = _BLOCK_AT + _BLOCK.size
        struct.pack_into("<I", page, end, zlib.crc32(page[:end]))
        files.write_atomic(path, bytes(page))


def path_of(root: str) -> str:
    return os.path.join(root, "checkpoint")
