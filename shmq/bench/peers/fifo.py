"""faster-fifo: a circular buffer in shared memory with a process-shared mutex (pickled
items, like multiprocessing.Queue, without the feeder thread). ``put_many`` for batches,
``get_many`` on the consumer side."""
from __future__ import annotations

import queue

from .base import FuncReceiver, FuncSender, Peer

BUFFER_BYTES = 64 * 1024 * 1024


class FasterFifoPeer(Peer):
    name = "faster-fifo"
    description = "faster_fifo.Queue (64 MiB shared circular buffer), put/put_many, get_many"

    def skip_reason(self, sc, env):
        try:
            import faster_fifo  # noqa: F401
        except ImportError:
            return "faster-fifo is not installed (pip install shmq[bench])"
        return super().skip_reason(sc, env)

    def setup(self, sc, env, tmpdir):
        from faster_fifo import Queue
        need = sc.count * (sc.size + 64) * 2 if sc.backlog else 0
        return Queue(max_size_bytes=max(BUFFER_BYTES, need))

    @classmethod
    def open_sender(cls, q, sc, idx):
        put, put_many = q.put, q.put_many
        return FuncSender(lambda body: put(body, True, 30.0), lambda bodies: put_many(bodies, True, 30.0))

    @classmethod
    def open_receiver(cls, q, sc, idx):
        get_many = q.get_many

        def recv(timeout):
            try:
                return get_many(block=True, timeout=timeout, max_messages_to_get=256)
            except queue.Empty:
                return []

        return FuncReceiver(recv)
