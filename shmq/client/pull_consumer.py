"""PullConsumer (RocketMQ's lite pull consumer): subscribe (queues are rebalanced as for a
push consumer) or assign queues; ``poll(timeout)`` returns what the background pulls
fetched; ``seek`` moves a queue; offsets are committed by ``commit()`` (or automatically
after each poll with auto_commit=True)."""
from __future__ import annotations

import queue
import threading
import time

from shmq.errors import ShmqError

from .consumer_core import ConsumerCore, ProcessQueue
from .message import MessageExt, MessageQueue


class PullConsumer(ConsumerCore):
    consume_type = "CONSUME_ACTIVELY"

    def __init__(self, group: str, namesrv: str = "127.0.0.1:9876", *, auto_commit: bool = True,
                 poll_batch_size: int = 32, **kw):
        kw.setdefault("pull_threshold_for_queue", 1000)
        super().__init__(group, namesrv, **kw)
        self.auto_commit = auto_commit
        self.poll_batch_size = poll_batch_size
        self._ready: "queue.Queue[tuple[ProcessQueue, MessageExt]]" = queue.Queue()
        self._polled: list[tuple[ProcessQueue, MessageExt]] = []
        self._assigned: list[MessageQueue] | None = None
        self._lock = threading.Lock()

    # ---- assignment --------------------------------------------------------------------
    def assign(self, queues: list[MessageQueue]) -> None:
        """Consume exactly these queues (no rebalance)."""
        self._assigned = sorted(queues)
        for mq in queues:
            if mq.topic not in self.subscriptions:
                self.subscribe(mq.topic, "*")

    async def rebalance(self) -> None:
        if self._assigned is None:
            return await super().rebalance()
        for mq in self._assigned:
            if mq in self.pqs:
                continue
            start = await self._start_offset(mq)
            pq = ProcessQueue(mq, start)
            self.pqs[mq] = pq
            await self._start_pulling(pq)

    def assignment(self) -> list[MessageQueue]:
        return sorted(self.pqs)

    # ---- polling -----------------------------------------------------------------------
    def _deliver(self, pq: ProcessQueue, msgs: list[MessageExt]) -> None:
        for m in msgs:
            self._ready.put((pq, m))

    def poll(self, timeout: float = 1.0) -> list[MessageExt]:
        if self.auto_commit:
            self.commit()
        out: list[tuple[ProcessQueue, MessageExt]] = []
        deadline = time.monotonic() + timeout
        while len(out) < self.poll_batch_size:
            left = deadline - time.monotonic()
            try:
                item = self._ready.get(timeout=max(0.0, left)) if not out and left > 0 else self._ready.get_nowait()
            except queue.Empty:
                break
            if not item[0].dropped:
                out.append(item)
        with self._lock:
            self._polled += out
        return [m for _, m in out]

    def commit(self) -> None:
        """Commit everything poll() returned so far."""
        with self._lock:
            polled, self._polled = self._polled, []
        by_pq: dict[int, tuple[ProcessQueue, list]] = {}
        for pq, m in polled:
            by_pq.setdefault(id(pq), (pq, []))[1].append(m)
        for pq, msgs in by_pq.values():
            self.offsets.update(pq.mq, pq.remove(msgs))
        if polled and self.instance is not None:
            self.instance.call_soon(self.offsets.persist())

    def seek(self, mq: MessageQueue, offset: int) -> None:
        """Consume ``mq`` from ``offset`` on (messages already fetched past it are dropped)."""
        if mq not in self.pqs:
            raise ShmqError(f"{mq} is not assigned to this consumer")
        self.instance.call(self.move_to(mq, offset), 10)

    def committed(self, mq: MessageQueue) -> int:
        return self.instance.call(self.offsets.read(mq), 10) if self.model == "CLUSTERING" else self.offsets.table.get(mq, -1)


__all__ = ["PullConsumer"]
