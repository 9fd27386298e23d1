#!/usr/bin/env python3
"""A worker's instructions per SEND_BATCH_MESSAGE of 32 x 100 B (or, with KIND=single, per plain
SEND_MESSAGE_V2 of 100 B, 200 to a read as a burst of async sends arrives), in process, for callgrind:

    PYTHONPATH=<tree> valgrind --tool=callgrind .venv/bin/python bench/worker_batch_instr.py N
    FEED=0 PYTHONPATH=<tree> valgrind --tool=callgrind .venv/bin/python bench/worker_batch_instr.py N
    KIND=single PYTHONPATH=<tree> valgrind --tool=callgrind .venv/bin/python bench/worker_batch_instr.py N

N + 2 frames (one producer's sync send_batch each: a UNIQ_KEY per entry, batch text "") are
built, then (FEED=1) each fed as one read to a worker Connection (transport.data_received, the
send processor, the C path when the tree has it) over a store without its services (the flush,
index and prefault threads are the supervisor's in a broker). Run at two N, and with FEED=0 at
the same two: (Ir(N2) - Ir(N1)) / (N2 - N1), fed minus not fed, is the worker's cost per batch
without the socket and the event loop's wait (tests/unit/test_send_fast.py's stand-in worker).
"""
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

tree = Path(os.environ.get("PYTHONPATH") or Path(__file__).resolve().parent.parent)
sys.path.insert(0, str(tree))

from shmq.broker.worker import dispatch  # noqa: E402
from shmq.message.batch import encode_batch  # noqa: E402
from shmq.protocol import RequestCode  # noqa: E402
from shmq.protocol.command import encode_command, request  # noqa: E402
from shmq.protocol.headers import send_v2_ext  # noqa: E402
from shmq.protocol.transport import Connection, Limits  # noqa: E402
from shmq.store import MessageStore  # noqa: E402
from tests.conftest import small_config  # noqa: E402
from tests.unit.test_send_fast import _Transport, _Worker  # noqa: E402


def frame(i: int) -> bytes:
    if SINGLE:  # a client's properties: UNIQ_KEY and WAIT, escaped \u0001 / \u0002 in the JSON
        ext = send_v2_ext("pg", "T", "TBW102", 4, 1, 0, 1700000000000, 0,
                          f"UNIQ_KEY\x01{i:032X}\x02WAIT\x01true\x02", False)
        cmd = request(RequestCode.SEND_MESSAGE_V2, ext, b"x" * 100)
        cmd.opaque = i
        return encode_command(cmd)
    body = encode_batch([(b"x" * 100, f"UNIQ_KEY\x01{i:016X}{k:016X}", 0) for k in range(32)])
    ext = send_v2_ext("pg", "T", "TBW102", 4, 1, 0, 1700000000000, 0, "", True)
    cmd = request(RequestCode.SEND_BATCH_MESSAGE, ext, body)
    cmd.opaque = i
    return encode_command(cmd)


async def run(frames: list[bytes], feed: bool, first: str, root: str) -> None:
    w = _Worker(first)
    w.store.close()
    w.store = MessageStore.open(small_config(root, mapped_file_size_commitlog=256 << 20, cq_entries_per_file=300000),
                                start_services=False)
    w.pipeline = type(w.pipeline)(w.store, "TestCluster")
    handlers, fp = dispatch.build(w)
    t = _Transport()
    conn = Connection(handlers, Limits())
    conn.fast = fp
    conn.connection_made(t)
    if SINGLE:  # the first learnt by the Python path, the rest in reads of 200
        frames = frames[:1] + [b"".join(frames[i:i + 200]) for i in range(1, len(frames), 200)]
    for f in frames if feed else frames[:2]:
        conn.data_received(f)
        t.out.clear()
        await asyncio.sleep(0)
    assert not feed or w.stats["put"] == (1 if SINGLE else 32) * N, w.stats
    w.store.close()


SINGLE = os.environ.get("KIND") == "single"

if __name__ == "__main__":
    n = int(sys.argv[1])
    N = n + 2
    dirs = [tempfile.mkdtemp(prefix="worker-batch-instr-") for _ in range(2)]
    try:
        asyncio.run(run([frame(i) for i in range(n + 2)], os.environ.get("FEED", "1") == "1", *dirs))
    finally:
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
