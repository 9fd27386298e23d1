"""Queue locks for orderly consumption (RocketMQ's ``RebalanceLockManager``), kept by the
supervisor so that one lock table serves every worker.

A lock is (group, topic, broker name, queue id) -> (client id, last renewal). A client locks
a queue if nobody holds it, if it holds it already (renewal), or if the holder let it expire
(``rebalanceLockMaxLiveTime``, 60 s; orderly consumers renew every 20 s). Unlock frees only
the caller's own locks. Pure data; ``now`` is monotonic seconds.
"""
from __future__ import annotations

from shmq.protocol.bodies import MessageQueue


class LockTable:
    def __init__(self, max_live_s: float = 60.0):
        self.max_live_s = max_live_s
        self._locks: dict[str, dict[MessageQueue, tuple[str, float]]] = {}

    def _free_or_mine(self, held: tuple[str, float] | None, client_id: str, now: float) -> bool:
        return held is None or held[0] == client_id or now - held[1] > self.max_live_s

    def try_lock(self, group: str, client_id: str, mqs: list[MessageQueue], now: float) -> list[MessageQueue]:
        table = self._locks.setdefault(group, {})
        ok: list[MessageQueue] = []
        for mq in mqs:
            if self._free_or_mine(table.get(mq), client_id, now):
                table[mq] = (client_id, now)
                ok.append(mq)
        return ok

    def unlock(self, group: str, client_id: str, mqs: list[MessageQueue]) -> None:
        table = self._locks.get(group)
        if not table:
            return
        for mq in mqs:
            held = table.get(mq)
            if held is not None and held[0] == client_id:
                del table[mq]
        if not table:
            del self._locks[group]

    def holder(self, group: str, mq: MessageQueue, now: float) -> str | None:
        held = self._locks.get(group, {}).get(mq)
        if held is None or now - held[1] > self.max_live_s:
            return None
        return held[0]
