"""multiprocessing.Queue: the standard library's inter-process queue (pickled items over a
pipe, a feeder thread in each producer). A batch is one item (a list of bodies). Bounded
(``MAXSIZE`` items, as pyzmq's default high-water mark bounds it) so that a producer sending
as fast as it can blocks instead of starving its own feeder thread of the GIL while its
buffer grows without limit; unbounded for a pull backlog."""
from __future__ import annotations

import multiprocessing as mp
import queue

from .base import FuncReceiver, FuncSender, Peer


MAXSIZE = 1000


class MpQueuePeer(Peer):
    name = "mp.Queue"
    description = "multiprocessing.Queue (spawn context, at most 1000 items), one queue shared by all processes"

    def setup(self, sc, env, tmpdir):
        return mp.get_context("spawn").Queue(0 if sc.backlog else MAXSIZE)

    @classmethod
    def open_sender(cls, q, sc, idx):
        def close():
            q.cancel_join_thread()  # the run may stop with messages nobody will take
            q.close()

        if sc.batch > 1:
            return FuncSender(lambda body: q.put([body]), q.put, close)
        return FuncSender(lambda body: q.put(body), None, close)

    @classmethod
    def open_receiver(cls, q, sc, idx):
        get, get_nowait = q.get, q.get_nowait
        batched = sc.batch > 1

        def recv(timeout):
            try:
                first = get(True, timeout)
            except queue.Empty:
                return []
            out = list(first) if batched else [first]
            try:
                for _ in range(255):
                    item = get_nowait()
                    if batched:
                        out.extend(item)
                    else:
                        out.append(item)
            except queue.Empty:
                pass
            return out

        return FuncReceiver(recv)
