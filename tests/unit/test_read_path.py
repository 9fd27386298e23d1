"""protocol/read_path.py: a connection with a fast hook serves every frame once and in order, the
same whether a read is whole frames the hook takes all of (the one-call read) or any other read:
a stream cut at every byte boundary, or fed a byte at a time, gives what the whole stream gives;
a bad length or an undecodable header after frames the hook took closes the connection with the
frames before it served; a lost connection fails what is still pending."""
from __future__ import annotations

import asyncio
import struct

from shmq.client.message import SendStatus
from shmq.client.remote_send import AsyncSend, answers
from shmq.errors import RemotingClosed
from shmq.protocol import RemotingCommand
from shmq.protocol.command import encode_command
from shmq.protocol.send_answer import send_ext
from shmq.protocol.transport import Connection, Limits

from .test_remote_answer import MQ, NO_RETRY, answer


class _Transport:
    def __init__(self):
        self.out, self.closed = [], False

    def write(self, data) -> None:
        self.out.append(bytes(data))

    def is_closing(self) -> bool:
        return self.closed

    def get_extra_info(self, key):
        return ("127.0.0.1", 40000)

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True


class _Fast:
    """A fast hook in Python over the same contract: takes the complete frames whose opaque is
    even (noting them, their waiter answered), stops with ``stop`` at a complete odd one (the
    Python path's)."""

    def __init__(self, seen: list):
        self.seen = seen

    def __call__(self, conn, data, pos):
        n = len(data)
        while n - pos >= 4:
            total = int.from_bytes(data[pos:pos + 4], "big")
            if total < 4 or total > n - pos - 4:
                break
            parts = data[pos + 8:pos + 4 + total].split(b'"opaque":')
            if len(parts) != 2:  # not an answer it reads: the Python path's (its error, here)
                return pos, None, True
            opaque = int(parts[1].split(b",")[0])
            if opaque % 2:
                return pos, None, True
            self.seen.append(("fast", opaque))
            conn._pending.pop(opaque).ok = True  # answered here, as the C hook pops its waiter
            pos += 4 + total
        return pos, None, False


class _Waiter:
    def __init__(self, seen, opaque):
        self.seen, self.opaque, self.ok = seen, opaque, False

    def done(self) -> bool:
        return self.ok

    def set_result(self, cmd) -> None:
        self.ok = True
        self.seen.append(("python", cmd.opaque))

    def set_exception(self, e) -> None:
        self.ok = True
        self.seen.append(("failed", self.opaque, type(e).__name__))


def _frame(opaque: int) -> bytes:
    return encode_command(RemotingCommand(code=0, opaque=opaque, remark="r" * (opaque % 5)).make_response(0, None, {"k": "v"}))


def _feed(chunks, opaques, fast_kind: str):
    async def go():
        seen: list = []
        conn = Connection({}, Limits())
        conn.fast = _Fast(seen) if fast_kind == "python" else None
        t = _Transport()
        conn.connection_made(t)
        for o in opaques:
            conn._pending[o] = _Waiter(seen, o)
        for c in chunks:
            conn.data_received(c)
        held = conn.partial_since is not None
        conn.connection_lost(None)
        return seen, held, t.closed
    return asyncio.run(go())


def _cuts(stream: bytes):
    """The stream cut once at every byte boundary, and fed a byte at a time."""
    for k in range(1, len(stream)):
        yield [stream[:k], stream[k:]]
    yield [stream[i:i + 1] for i in range(len(stream))]


def test_a_stream_cut_at_every_byte_serves_every_frame_once_in_order():
    opaques = [2, 4, 1, 6, 3, 5, 8, 10]  # taken, taken, Python's, taken, Python's x2, taken x2
    stream = b"".join(_frame(o) for o in opaques)
    whole = _feed([stream], opaques, "python")
    assert whole[0] == [("fast" if o % 2 == 0 else "python", o) for o in opaques] and not whole[1]
    assert _feed([stream], opaques, "none")[0] == [("python", o) for o in opaques]
    for chunks in _cuts(stream):
        assert _feed(chunks, opaques, "python") == whole, [len(c) for c in chunks][:3]


def test_the_c_hook_reads_answers_cut_at_every_byte_as_the_whole_stream():
    opaques = [1, 2, 3, 4]
    frames = [answer(1, offset=11), answer(2, code=14, remark="busy"), answer(3, offset=33),
              answer(4, ext=send_ext("AB", 1, 44))]
    stream = b"".join(frames)

    def run(chunks):
        async def go():
            conn = Connection({}, Limits())
            conn.fast = answers
            conn.connection_made(_Transport())
            futs = {o: AsyncSend(NO_RETRY, None, MQ, None, "U%d" % o, 3) for o in opaques}
            conn._pending.update(futs)
            for c in chunks:
                conn.data_received(c)
            out = []
            for o, f in futs.items():
                e = f.exception(0) if f.done() else None
                out.append("pending" if not f.done() else type(e).__name__ if e else (f.result(0).queue_offset, f.result(0).status))
            return out, sorted(conn._pending), conn.partial_since is None
        return asyncio.run(go())
    whole = run([stream])
    assert whole == ([(11, SendStatus.SEND_OK), "BrokerError", (33, SendStatus.SEND_OK), (44, SendStatus.SEND_OK)], [], True)
    for chunks in _cuts(stream):
        assert run(chunks) == whole


def test_a_bad_length_or_header_after_taken_frames_closes_with_them_served():
    big = struct.pack(">i", 64 * 1024 * 1024)  # over the frame limit
    garbage = struct.pack(">ii", 8, 4) + b"{bad"  # a length that holds, a header that does not parse
    for bad in (big, garbage):
        stream = _frame(2) + _frame(4) + bad + _frame(6)
        for chunks in ([stream], [stream[:len(_frame(2)) + 3], stream[len(_frame(2)) + 3:]]):
            seen, _, closed = _feed(chunks, [2, 4, 6], "python")
            # 2 and 4 taken; 6 is never served (nothing after the error is), it is failed by the loss
            assert seen == [("fast", 2), ("fast", 4), ("failed", 6, "RemotingClosed")] and closed


def test_a_lost_connection_fails_the_pending_after_a_whole_read():
    async def go():
        conn = Connection({}, Limits())
        conn.fast = answers
        conn.connection_made(_Transport())
        futs = {o: AsyncSend(NO_RETRY, None, MQ, None, "U", 3) for o in (1, 2)}
        conn._pending.update(futs)
        conn.data_received(answer(1))  # the one-call read
        conn.connection_lost(None)
        return futs[1].result(0).status, type(futs[2].exception(0))
    assert asyncio.run(go()) == (SendStatus.SEND_OK, RemotingClosed)


def test_a_large_frame_in_many_reads_is_held_once_not_copied_at_every_read(monkeypatch):
    """A 4 MiB answer in 64 KiB reads on a connection with a fast hook: the reads that leave it
    incomplete are appended by the decoder, and the held bytes are taken out once, by the read
    that completes the frame (taken and glued at every read, the frame cost quadratic copying:
    a 4 MiB message ran 6x slower with a fast path set than without)."""
    from shmq.protocol.frame import FrameDecoder
    taken: list[int] = []
    real = FrameDecoder.take_pending

    def counted(self):
        data = real(self)
        taken.append(len(data))
        return data
    monkeypatch.setattr(FrameDecoder, "take_pending", counted)
    body = bytes(range(256)) * (4 * 4096)
    big = encode_command(RemotingCommand(code=0, opaque=2).make_response(0, None, {"k": "v"}, body=body))
    stream = big + _frame(4) + _frame(1)
    reads = [stream[i:i + 65536] for i in range(0, len(stream), 65536)]

    async def go():
        seen: list = []
        conn = Connection({}, Limits())
        conn.fast = _Fast(seen)
        conn.connection_made(_Transport())
        for o in (2, 4, 1):
            conn._pending[o] = _Waiter(seen, o)
        for r in reads:
            conn.data_received(r)
        return seen, conn.partial_since is None
    assert len(reads) > 64
    assert asyncio.run(go()) == ([("fast", 2), ("fast", 4), ("python", 1)], True)
    assert len(taken) == 1 and taken[0] > len(big) - 65536
