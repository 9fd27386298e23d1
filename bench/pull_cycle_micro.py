#!/usr/bin/env python3
"""Instructions of the TCP PushConsumer's one-message pull cycle, counted in one process without
a broker: the Python and C a consumer runs per pulled message, apart from the event loop's turn
and the system calls (those are bench/pull_cycle_callgrind.py's live count).

    .venv/bin/python bench/pull_cycle_micro.py [--n 3000] [--tree <checkout>]

A real PushConsumer (not started: its ClientInstance replaced by the few fields a pull uses,
``read_addr`` the real one), a TcpPull chain on a real client ``Connection`` with the C answer
hook over a transport that only counts writes, a real ConsumePool whose task is run here by
``operator.call`` instead of on its thread. Each cycle: one broker answer (SUCCESS, one 100 B
record, the frames made before by shmq's encoder from a real store) goes through
``Connection.data_received`` (the C read of the answer, ``TcpPull._pulled``, the ProcessQueue, the
next PULL written, the hand-over), then the consume task (the listener, the ProcessQueue's
removal, the offset). Under callgrind with ``--toggle-collect`` on ``answers()`` and
``operator.call``, only those two are counted: per cycle from the answer's C read on, and the
consume task; the same on every run (no fixed costs in the window). ``--tree`` measures another
checkout (e.g. a scratch worktree of an older commit, its C core built in place) with this script.
Every file goes to a temp dir that is removed.

``--loop`` counts the same cycle with the loop's turn and the system calls' wrappers in: the
client's real loop (``client/handoff.py``'s ClientLoop, its selector paying the consume thread's
wake-up), a real socket whose peer (another process, uncounted) answers each PULL with the next
prepared answer, the consume task on a real consume thread. Counted with ``--separate-threads``
over the whole run, twice (``--n`` and a quarter of it): the difference per cycle, for the loop
thread and the consume thread. What ``pull_cycle_callgrind.py --process consumer`` counts in the
live process, without its periodic jobs and heartbeats.
"""
import argparse
import asyncio
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace


def frames(n: int, root: Path) -> list[bytes]:
    """The broker's answers to pulls 1..n of queue T:0, one record each (offset i, opaque i + 1)."""
    from shmq.protocol import RemotingCommand, RequestCode
    from shmq.protocol.command import encode_command
    from shmq.store import MessageStore, StoreConfig
    store = MessageStore.open(StoreConfig(root=str(root), mapped_file_size_commitlog=1 << 20, cq_entries_per_file=1000,
                                          disk_max_used_space_ratio=100))
    try:
        for _ in range(n):
            store.put("T", 0, b"x" * 100)
        out = []
        for i in range(n):
            body = b"".join(bytes(v) for v in store.get_messages("T", 0, i, 1, max_bytes=1 << 30).messages)
            ext = {"suggestWhichBrokerId": "0", "nextBeginOffset": str(i + 1), "minOffset": "0", "maxOffset": str(n)}
            out.append(encode_command(RemotingCommand(code=RequestCode.PULL_MESSAGE, opaque=i + 1)
                                      .make_response(0, "FOUND", ext, body)))
        return out
    finally:
        store.close()


class _Transport:
    def __init__(self):
        self.writes = 0

    def write(self, data) -> None:
        self.writes += 1

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, key):
        return ("127.0.0.1", 40000)

    def pause_reading(self) -> None: ...
    def resume_reading(self) -> None: ...
    def close(self) -> None: ...


def _consumer(conn, listener, selector):
    """A started PushConsumer of group G on topic T whose one queue (broker b, queue 0) is pulled
    over ``conn``, its one consume thread handed over through ``selector``: (consumer, pool,
    ProcessQueue); the caller starts the queue's TcpPull."""
    from shmq import PushConsumer
    from shmq.client.consumer_core import ProcessQueue
    from shmq.client.handoff import ConsumePool
    from shmq.client.instance import ClientInstance
    from shmq.client.message import MessageQueue
    from shmq.client.offset_store import RemoteOffsetStore
    c = PushConsumer("G", namesrv="127.0.0.1:1", consume_batch_size=32)
    c.subscribe("T", "*")
    c.on_message(listener)
    client = SimpleNamespace(rpc_hook=None)

    async def connect(addr):
        return client, conn
    inst = SimpleNamespace(broker_addrs={"b": {0: "127.0.0.1:1"}}, _unreachable={}, connect=connect)
    inst.read_addr = ClientInstance.read_addr.__get__(inst)
    c.instance, c._running, c._inline, c._gated = inst, True, False, False
    c.offsets = RemoteOffsetStore(inst, "G")
    c._pool = pool = ConsumePool(1, "micro", selector, threading.current_thread())
    pq = ProcessQueue(MessageQueue("T", "b", 0), 0)
    c.pqs[pq.mq] = pq
    return c, pool, pq


async def cycles(answers_: list[bytes]) -> None:
    import operator
    from shmq import ConsumeResult
    from shmq.client import tcp_pull
    from shmq.client.handoff import HandoffSelector
    from shmq.client.remote_send import answers
    from shmq.native import lib
    from shmq.protocol import transport
    from shmq.protocol.transport import Limits
    Connection = getattr(transport, "ClientConnection", transport.Connection)  # a client's, as RemotingClient makes
    conn = Connection({}, Limits())
    conn.fast = answers
    t = _Transport()
    conn.connection_made(t)
    seen = [0]

    def listener(msgs):
        seen[0] += len(msgs)
        return ConsumeResult.SUCCESS
    c, pool, pq = _consumer(conn, listener, HandoffSelector())
    task = asyncio.ensure_future(tcp_pull.TcpPull(c, pq).run())
    for _ in range(3):
        await asyncio.sleep(0)
    tasks, call, n = pool._tasks, operator.call, len(answers_)
    t0 = time.perf_counter()
    for frame in answers_:
        conn.data_received(frame)
        fn, args = tasks.popleft()
        call(fn, *args)  # the consume task, here (callgrind counts inside operator.call)
    dt = time.perf_counter() - t0
    assert seen[0] == n and c.offsets.table[pq.mq] == n and t.writes == n + 1, (seen, c.offsets.table, t.writes)
    print(f"{n} cycles, {dt / n * 1e6:.1f} µs each (wall clock, uncounted)", file=sys.stderr)
    c._running, pq.dropped = False, True
    task.cancel()
    pool._h.posts = 0  # the wake-ups owed here were never paid: the thread is not to run them
    pool._stopping = True
    lib.shmq_handoff_post(pool._h, 1)


PEER = """import os, socket, sys, pickle
answers = pickle.loads(open(sys.argv[2], "rb").read())[:int(sys.argv[3])]
s = socket.socket(fileno=int(sys.argv[1]))
def frame():
    b = b""
    while len(b) < 4:
        b += s.recv(4 - len(b))
    n = int.from_bytes(b, "big")
    while len(b) < 4 + n:
        b += s.recv(4 + n - len(b))
for a in answers:
    frame()
    s.sendall(a)
frame()
s.close()
"""


def loop_cycles(answers_: list[bytes]) -> None:
    """The counted child of ``--loop``: the cycles on a ClientLoop over a socket to PEER."""
    import socket
    from shmq import ConsumeResult
    from shmq.client import tcp_pull
    from shmq.client.handoff import ClientLoop
    from shmq.client.remote_send import answers
    from shmq.protocol import transport
    from shmq.protocol.transport import Limits
    Connection = getattr(transport, "ClientConnection", transport.Connection)  # a client's, as RemotingClient makes
    n = len(answers_)
    mine, theirs = socket.socketpair()
    tmp = Path(tempfile.mkdtemp(prefix="pcl-"))
    (tmp / "a").write_bytes(pickle.dumps(answers_))
    peer = subprocess.Popen([sys.executable, "-c", PEER, str(theirs.fileno()), str(tmp / "a"), str(n)],
                            pass_fds=[theirs.fileno()])
    theirs.close()
    loop = ClientLoop()
    asyncio.set_event_loop(loop)
    done = loop.create_future()
    seen = [0]

    def listener(msgs):
        seen[0] += len(msgs)
        if seen[0] == n:
            loop.call_soon_threadsafe(done.set_result, None)
        return ConsumeResult.SUCCESS

    async def run() -> None:
        _, conn = await loop.create_connection(lambda: Connection({}, Limits()), sock=mine)
        conn.fast = answers
        try:  # read in C as RemotingClient.connect reads it (a tree before readc14 has no C reader)
            from shmq.protocol import read_native
        except ImportError:
            pass
        else:
            read_native.attach(conn)
        c, pool, pq = _consumer(conn, listener, loop.handoff)
        task = asyncio.ensure_future(tcp_pull.TcpPull(c, pq).run())
        await done
        c._running, pq.dropped = False, True
        task.cancel()
        pool.shutdown()
        conn.close()
    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
        peer.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def count_loop(a) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="pcm-"))
    try:
        (tmp / "frames").write_bytes(pickle.dumps(frames(a.n, tmp / "store")))
        per = {}
        for n in (a.n // 4, a.n):
            out = tmp / f"cg{n}"
            subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
                            "--separate-threads=yes", sys.executable, __file__, "--tree", a.tree, "--loop",
                            "--n", str(n), "--run", str(tmp / "frames")], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
            per[n] = []
            for f in sorted(tmp.glob(f"cg{n}-*")):  # -01 the loop (main) thread, then the others
                per[n].append(int(re.search(r"^(?:summary|totals): (\d+)", f.read_text(), re.M).group(1)))
        n1, n2 = a.n // 4, a.n
        loop_t = (per[n2][0] - per[n1][0]) / (n2 - n1)
        rest = (sum(per[n2][1:]) - sum(per[n1][1:])) / (n2 - n1)
        print(f"{a.tree}: {loop_t + rest:,.0f} instructions per one-message pull cycle with the loop's turn "
              f"(the loop thread {loop_t:,.0f}; the other threads, the consume task {rest:,.0f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=3000)
    ap.add_argument("--tree", default=os.getcwd())
    ap.add_argument("--run", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--loop", action="store_true", help="with the loop's turn and a real socket (see above)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.tree))
    if a.run is not None:  # the counted child
        frames_ = pickle.loads(Path(a.run).read_bytes())
        if a.loop:
            return loop_cycles(frames_[:a.n])
        asyncio.run(cycles(frames_))
        return
    if a.loop:
        return count_loop(a)
    tmp = Path(tempfile.mkdtemp(prefix="pcm-"))
    try:
        (tmp / "frames").write_bytes(pickle.dumps(frames(a.n, tmp / "store")))
        out = tmp / "cg.out"
        subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
                        "--toggle-collect=*a_answers*", "--toggle-collect=*operator_call*", sys.executable, __file__,
                        "--tree", a.tree, "--run", str(tmp / "frames")], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        total = int(re.search(r"^(?:summary|totals): (\d+)", out.read_text(), re.M).group(1))
        ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(out)], capture_output=True, text=True).stdout
        m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*remote_answer\.c:a_answers \[", ann, re.M)
        loop_side = int(m.group(1).replace(",", "")) if m else 0
        print(f"{a.tree}: {total / a.n:,.0f} instructions per one-message pull cycle "
              f"(answer read -> next PULL written -> hand-over: {loop_side / a.n:,.0f}; "
              f"the consume task: {(total - loop_side) / a.n:,.0f})")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
