"""The checkpoint file: shmq's offsets in a page Apache RocketMQ's StoreCheckpoint can map."""
from __future__ import annotations

import struct
import zlib

from shmq.store.checkpoint import PAGE, Checkpoint


def test_round_trip_in_rocketmq_page(tmp_path):
    p = str(tmp_path / "checkpoint")
    Checkpoint(1000, 900, 800).store(p)
    with open(p, "rb") as f:
        raw = f.read()
    assert len(raw) == PAGE
    # what RocketMQ reads: physic/logics/index timestamps, big-endian, all 0 (= recover from the
    # first file after a crash, never too late)
    assert struct.unpack_from(">qqq", raw, 0) == (0, 0, 0)
    assert Checkpoint.load(p) == Checkpoint(1000, 900, 800)


def test_a_page_rocketmq_wrote_since_is_not_trusted(tmp_path):
    p = tmp_path / "checkpoint"
    Checkpoint(1000, 900, 800).store(str(p))
    raw = bytearray(p.read_bytes())
    struct.pack_into(">qqq", raw, 0, 1_700_000_000_000, 1_700_000_000_000, 1_700_000_000_000)
    p.write_bytes(raw)
    assert Checkpoint.load(str(p)) == Checkpoint()  # zeros: recovery scans everything
    p.write_bytes(bytes(PAGE))  # RocketMQ's own fresh checkpoint
    assert Checkpoint.load(str(p)) == Checkpoint()


def test_version_1_is_still_read(tmp_path):
    p = tmp_path / "checkpoint"
    body = struct.pack("<4sIqqqq", b"SQCP", 1, 30, 20, 10, 0)
    p.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    assert Checkpoint.load(str(p)) == Checkpoint(30, 20, 10)
    p.write_bytes(body + b"\0\0\0\0")
    assert Checkpoint.load(str(p)) == Checkpoint()


def test_missing_or_short_file_reads_as_zeros(tmp_path):
    assert Checkpoint.load(str(tmp_path / "none")) == Checkpoint()
    (tmp_path / "short").write_bytes(b"SQCP")
    assert Checkpoint.load(str(tmp_path / "short")) == Checkpoint()
