"""The worker's C path for plain sends under SYNC_FLUSH (processors/send_fast.py): it answers
what the Python path answers, byte for byte, and no answer leaves before its record is flushed;
a send not flushed in time is answered FLUSH_DISK_TIMEOUT with its ids, as the Python path does."""
from __future__ import annotations

import asyncio

from shmq.broker.worker import dispatch
from shmq.protocol.command import decode_command
from shmq.protocol.transport import Connection, Limits
from shmq.store import SYNC_FLUSH, MessageStore

from ..conftest import small_config
from .test_send_fast import _frames, _send, _Transport, _Worker


class _SyncWorker(_Worker):
    def __init__(self, root, **kw):
        super().__init__(root)
        self.store.close()
        self.store = MessageStore.open(small_config(root, flush_disk_type=SYNC_FLUSH, **kw))
        self.pipeline = type(self.pipeline)(self.store, "TestCluster")


class _Watched(_Transport):
    """Records, at each write, the flushed position: what the answers written then may claim."""

    def __init__(self, store):
        super().__init__()
        self.store = store
        self.writes: list[tuple[int, bytes]] = []

    def write(self, data):
        self.writes.append((self.store.flushed_pos, bytes(data)))
        super().write(data)


def _answers(data: bytes):
    pos = 0
    while pos < len(data):
        end = pos + 4 + int.from_bytes(data[pos:pos + 4], "big")
        yield decode_command(data[pos + 4:end])
        pos = end


def _run(root, fast: bool, chunks, *, stop_flusher=False, wait_s=0.3, **kw):
    async def main():
        w = _SyncWorker(root, **kw)
        if stop_flusher:
            w.store.flusher.stop()
        handlers, fp = dispatch.build(w)
        assert fp is not None  # SYNC_FLUSH has the C path now
        t = _Watched(w.store)
        conn = Connection(handlers, Limits())
        before = [0]

        def counting(conn, data, pos):
            n = w.stats["put"]
            r = fp(conn, data, pos)
            before[0] += w.stats["put"] - n
            return r

        conn.fast = counting if fast else None
        conn.connection_made(t)
        for c in chunks:
            conn.data_received(c)
            await asyncio.sleep(0)
        deadline = asyncio.get_running_loop().time() + wait_s + 5
        while conn.busy and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.01)
        await asyncio.sleep(wait_s)
        conn._flush()
        out = (bytes(t.out), list(t.writes), w.store)
        return out, before[0]

    return asyncio.run(main())


def _record_end(store, msg_id: str) -> int:
    phys = int(msg_id[-16:], 16)
    return phys + int.from_bytes(bytes(store.read_at(phys)[:4]), "big")


def test_sync_flush_c_path_answers_what_the_python_path_does(tmp_path):
    data = [b"".join(_frames())]
    (py, _, s1), _ = _run(tmp_path / "py", False, data)
    (c, writes, s2), taken = _run(tmp_path / "c", True, data)
    s1.close()
    try:
        assert taken == 10  # as without SYNC_FLUSH (test_send_fast): C took the learnt queues' sends
        assert c == py  # every answer, byte for byte, in the same order
        assert c.count(b'"code":0,') == 14
        for flushed, chunk in writes:  # no success answer left before its record was durable
            for resp in _answers(chunk):
                if resp.code == 0:
                    assert _record_end(s2, resp.ext_fields["msgId"]) <= flushed
    finally:
        s2.close()


def test_unflushed_c_path_sends_are_answered_flush_disk_timeout(tmp_path):
    frames = [_send(1), _send(2), _send(3), _send(4, oneway=True), _send(5)]
    (out, writes, s), taken = _run(tmp_path / "c", True, [frames[0]] + [b"".join(frames[1:])],
                                   stop_flusher=True, sync_flush_timeout_ms=200)
    try:
        assert taken == 4  # 2-5 by C (1 taught it the queue)
        got = list(_answers(out))
        assert [r.opaque for r in got] == [1, 2, 3, 5]  # the oneway one has no answer
        assert all(r.code == 10 and r.remark == "flush disk timeout" for r in got)
        for r in got:  # stored, with its ids, not confirmed
            assert s.read_at(int(r.ext_fields["msgId"][-16:], 16)) is not None
            assert r.ext_fields["queueOffset"] == str(r.opaque - 1)
        assert s.flushed_pos < s.commit_pos
    finally:
        s.close()
