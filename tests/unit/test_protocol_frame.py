"""FrameDecoder: the length word is judged before anything is buffered."""
from __future__ import annotations

import struct

import pytest

from shmq.errors import FrameError, FrameTooLarge
from shmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder


def test_whole_and_split_frames():
    f1 = struct.pack(">ii", 6, 2) + b"{}"
    f2 = struct.pack(">ii", 9, 2) + b"{}abc"
    dec = FrameDecoder()
    stream = f1 + f2
    for cut in range(len(stream) + 1):
        dec = FrameDecoder()
        got = dec.feed(stream[:cut]) + dec.feed(stream[cut:])
        assert got == [f1[4:], f2[4:]]
        assert dec.pending == 0


def test_byte_by_byte():
    f = struct.pack(">ii", 6, 2) + b"{}"
    dec = FrameDecoder()
    got = []
    for b in f * 3:
        got += dec.feed(bytes([b]))
    assert got == [f[4:]] * 3


def test_oversized_refused_from_the_length_word_alone():
    dec = FrameDecoder()
    with pytest.raises(FrameTooLarge) as e:
        dec.feed(struct.pack(">i", 0x7FFFFFFF))
    assert e.value.size == 0x7FFFFFFF + 4 and e.value.limit == DEFAULT_MAX_FRAME_SIZE
    assert dec.pending == 0  # nothing of it was kept


def test_limit_counts_the_length_word():
    dec = FrameDecoder(max_frame_size=100)
    assert dec.feed(struct.pack(">ii", 96, 2) + b"{}" + b"x" * 90)  # 100 bytes in all: accepted
    with pytest.raises(FrameTooLarge):
        FrameDecoder(max_frame_size=100).feed(struct.pack(">i", 97))


def test_oversized_after_a_good_frame_in_the_same_chunk():
    good = struct.pack(">ii", 6, 2) + b"{}"
    for split in (False, True):
        dec = FrameDecoder(max_frame_size=64)
        if split:  # the slow path, with bytes already buffered
            assert dec.feed(good[:3]) == []
            assert dec.feed(good[3:] + good + struct.pack(">i", 1000)) == [good[4:], good[4:]]
        else:
            assert dec.feed(good + struct.pack(">i", 1000)) == [good[4:]]  # the good one is still served
        assert isinstance(dec.error, FrameTooLarge)
        with pytest.raises(FrameTooLarge):
            dec.feed(good)


@pytest.mark.parametrize("total", [0, 1, 3, -1, -(2**31)])
def test_length_smaller_than_mark(total):
    with pytest.raises(FrameError):
        FrameDecoder().feed(struct.pack(">i", total))
