import os
import random
import zlib

from shmq.native import lib


def test_crc32_matches_zlib_at_every_length():
    # the table loop, the carry-less-multiply fold (>= 64 bytes) and their joins
    rng = random.Random(7)
    for n in list(range(0, 300)) + [1023, 1024, 1025, 4096, 65537]:
        data = os.urandom(n)
        seed = rng.randrange(1 << 32)
        assert lib.shmq_crc32(seed, data, n) == zlib.crc32(data, seed), n


def test_crc32_of_unaligned_buffers():
    data = os.urandom(5000)
    for start in range(0, 17):
        view = data[start:]
        assert lib.shmq_crc32(0, view, len(view)) == zlib.crc32(view)
