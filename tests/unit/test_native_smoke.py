import zlib

from shmq.native import lib


def test_crc32_matches_zlib():
    data = b"hello shmq" * 100
    assert lib.shmq_crc32(0, data, len(data)) == zlib.crc32(data)
