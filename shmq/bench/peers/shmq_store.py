"""shmq's store, used directly: the local path with no client and no broker in between.

An owner process opens the store on the run's temp dir (as the broker supervisor would:
flush thread, preallocation; index off); producers ``MessageStore.attach(root)`` and append
through ``queue_writer(topic, qid).put(body)`` / ``.put_batch(encoded)`` (one C call each);
consumers attach too, read their queues with ``get_messages`` (zero-copy memoryviews of the
records) and wait on the store's futex (``wait``, spinning ``SPIN_S`` first). The owner
process's CPU counts as "broker". Producer i writes queue i % Q, consumer j reads the queues
q with q % consumers == j, Q = max(producers, consumers); with several groups (``groups``) each
group reads every queue and its members share them so.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

from shmq.message.record import record_body

from .base import FuncReceiver, FuncSender, Peer

TOPIC = "BenchTopic"
SPIN_S = float(os.environ.get("SHMQ_BENCH_SPIN_US", "50")) / 1e6
COMMITLOG_MIN, COMMITLOG_MAX = 16 << 20, 128 << 20


def commitlog_file_size(sc) -> int:
    """CommitLog file size for a run: about half of what it may write (at most 1.5 M msgs/s),
    a power of two in [16 MiB, 128 MiB], so a short run does not pre-touch gigabytes."""
    msgs = sc.count if sc.count_mode else (sc.warmup + sc.duration) * (sc.rate or 1_500_000)
    want = int(msgs * (sc.size + 120) / 2)
    size = COMMITLOG_MIN
    while size < want and size < COMMITLOG_MAX:
        size *= 2
    return size


def _owner_main(root: str, sync: bool, file_size: int, conn) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    from shmq.store import ASYNC_FLUSH, SYNC_FLUSH, MessageStore, StoreConfig
    try:
        cfg = StoreConfig(root=root, mapped_file_size_commitlog=file_size, message_index_enable=False,
                          disk_max_used_space_ratio=95,  # as the broker's: no disk-pressure expiry mid-run
                          flush_disk_type=SYNC_FLUSH if sync else ASYNC_FLUSH)
        store = MessageStore.open(cfg)
    except BaseException as e:
        conn.send(f"{type(e).__name__}: {e}")
        return
    try:
        deadline = time.monotonic() + 20
        while len(store._prefaulted) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)  # the flush thread pre-touches the first two files
        conn.send("ready")
        conn.poll(None)  # until the parent says stop, or goes away
    finally:
        store.close()


class ShmqStorePeer(Peer):
    name = "shmq-store"
    description = "shmq MessageStore attached directly (C append, zero-copy reads, futex wait)"
    is_shmq = True
    durable = True

    def __init__(self):
        self._owner = None
        self._conn = None
        self._env = None

    def skip_reason(self, sc, env):
        if sc.transport != "local":
            return "local only (the store has no network path of its own)"
        return super().skip_reason(sc, env)

    def setup(self, sc, env, tmpdir):
        self._env = env
        root = os.path.join(tmpdir, "store")
        env.track_store(root)
        ctx = mp.get_context("spawn")
        rx, tx = ctx.Pipe()
        self._owner = ctx.Process(target=_owner_main, args=(root, sc.durable, commitlog_file_size(sc), tx), name="shmq-bench-store-owner")
        self._owner.start()
        env.track_process(self._owner.pid)
        self._conn = rx
        if not rx.poll(60):
            raise RuntimeError("the store owner did not start within 60 s")
        msg = rx.recv()
        if msg != "ready":
            raise RuntimeError(f"store owner: {msg}")
        return {"root": root, "queues": max(sc.producers, sc.consumers, 1)}

    def service_pids(self):
        return [self._owner.pid] if self._owner is not None else []

    def teardown(self):
        if self._owner is None:
            return
        try:
            self._conn.send("stop")
        except OSError:
            pass
        self._owner.join(20)
        if self._owner.is_alive():
            os.kill(self._owner.pid, signal.SIGKILL)
            self._owner.join(5)
        self._env.untrack_process(self._owner.pid)
        self._conn.close()
        self._owner = None

    @classmethod
    def open_sender(cls, ch, sc, idx):
        from shmq.message.batch import encode_batch
        from shmq.store import MessageStore
        store = MessageStore.attach(ch["root"])
        w = store.queue_writer(TOPIC, idx % ch["queues"])
        put, put_batch = w.put, w.put_batch
        return FuncSender(put, lambda bodies: put_batch(encode_batch([(b, b"", 0) for b in bodies])), store.close)

    @classmethod
    def open_receiver(cls, ch, sc, idx):
        from shmq.store import MessageStore
        store = MessageStore.attach(ch["root"])
        _, member, members = sc.group_of(idx)  # every group reads all queues, its members share them
        queues = [q for q in range(ch["queues"]) if q % members == member]
        offsets = {q: 0 for q in queues}
        get, wait = store.get_messages, store.wait
        cb = store.cb

        def recv(timeout):
            seen = cb.commit_pos
            out = []
            for q in queues:
                res = get(TOPIC, q, offsets[q], 256)
                if res.messages:
                    offsets[q] = res.next_begin_offset
                    out += map(record_body, res.messages)
                elif res.next_begin_offset > offsets[q]:
                    offsets[q] = res.next_begin_offset
            if not out:
                wait(seen, timeout, SPIN_S)
            return out

        return FuncReceiver(recv, store.close)
