"""Adapters: shmq's rows and the peers measured beside them (see base.py for the interface).

``PEERS`` maps the names ``--peers`` accepts to adapter classes; ``SHMQ`` lists shmq's own
rows (always run). Each row is constructed fresh for each run."""
from __future__ import annotations

from .base import Peer
from .fifo import FasterFifoPeer
from .limits import FloorPeer, FutexPeer, PageFloorPeer, SpinPeer
from .mpqueue import MpQueuePeer
from .redis_streams import RedisPeer
from .shmq_client import ShmqClientPeer
from .shmq_store import ShmqStorePeer
from .tcp_limit import TcpLimitPeer
from .zmq_ipc import ZmqPeer

PEERS: dict[str, type[Peer]] = {
    "mpqueue": MpQueuePeer,
    "faster-fifo": FasterFifoPeer,
    "zmq": ZmqPeer,
    "redis": RedisPeer,
    "py-floor": FloorPeer,
    "futex-limit": FutexPeer,
    "spin-limit": SpinPeer,
    "page-floor": PageFloorPeer,
    "tcp-limit": TcpLimitPeer,
}
SHMQ: dict[str, type[Peer]] = {
    "shmq": ShmqClientPeer,
    "shmq-store": ShmqStorePeer,
}
#: the limit rows (limits.py, tcp_limit.py) run when named: --peers py-floor,futex-limit,...
LIMITS = ("py-floor", "futex-limit", "spin-limit", "page-floor", "tcp-limit")
DEFAULT_PEERS = tuple(n for n in PEERS if n not in LIMITS)


def resolve(names: list[str]) -> list[type[Peer]]:
    """Adapter classes for ``--peers`` names (also accepts the row names, e.g. mp.Queue, pyzmq)."""
    by_row = {cls.name.lower(): cls for cls in (*PEERS.values(), *SHMQ.values())}
    out = []
    for n in names:
        key = n.strip().lower()
        if not key:
            continue
        cls = PEERS.get(key) or SHMQ.get(key) or by_row.get(key)
        if cls is None:
            raise ValueError(f"unknown peer {n!r} (one of {', '.join([*PEERS, *SHMQ])})")
        out.append(cls)
    return out
