"""Wire helpers of the disk-fault tests: drain a queue over TCP, ask the runtime info."""
from __future__ import annotations

import time

from shmq.message.record import iter_records
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import KVTable, decode_json

from ..integration.broker_helpers import pull

PULL_FOUND = 0


def drain(c: SyncRemotingClient, topic: str, queue_id: int = 0) -> list[bytes]:
    """Every body stored in the queue, in offset order, read over TCP."""
    out: list[bytes] = []
    offset = 0
    while True:
        r = pull(c, topic, queue_id, offset, max_nums=32)
        if r.code != PULL_FOUND:
            return out
        recs = list(iter_records(r.body))
        if not recs:
            return out
        out += [bytes(m.body) for m in recs]
        offset = int(r.ext_fields["nextBeginOffset"])


def runtime_info(c: SyncRemotingClient) -> dict[str, str]:
    return decode_json(c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).body, KVTable).table


def query_key(c: SyncRemotingClient, topic: str, key: str) -> list[bytes]:
    q = c.invoke(request(RequestCode.QUERY_MESSAGE, topic=topic, key=key, maxNum=64, beginTimestamp=0,
                         endTimestamp=2**62))
    if q.code != 0:
        return []
    return sorted(bytes(m.body) for m in iter_records(q.body))


def wait_for(pred, timeout: float = 10.0, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() > deadline:
            return v
        time.sleep(step)
