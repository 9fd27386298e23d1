"""What a worker gives its request processors: their only view of the worker process.

The worker (``main.py``) implements :class:`WorkerContext`; each processor module receives it
at registration (``Processor(ctx)``, see ``dispatch.py``) and never imports the worker, so the
request code depends on this small surface and not on the process around it (a test may pass
any object with these members).

Invariants the processors may rely on while a request is being served: ``store``,
``pipeline`` and ``holds`` are set (the worker serves no request before it has attached to
the store); ``topics`` is this worker's copy of the supervisor's topic table and may lag a
creation another worker made, so a miss is confirmed with :meth:`fetch_topic`; ``ctl`` may
be closed (the broker is shutting down), and :meth:`ctl_call` then raises ServiceNotAvailable.
"""
from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from shmq.broker.shared.attach import AttachGuard
    from shmq.broker.shared.config import BrokerConfig
    from shmq.broker.shared.topics import TopicTable
    from shmq.protocol import RemotingCommand
    from shmq.protocol.bodies import SubscriptionData, TopicConfig
    from shmq.protocol.transport import Connection
    from shmq.store import MessageStore
    from shmq.store.put import PutPipeline

    from .pull_hold import PullHolds


class WorkerContext(Protocol):
    cfg: BrokerConfig
    wid: int
    boot_ms: int
    #: ``{"put": n, "get": n}`` message counters for GET_BROKER_RUNTIME_INFO.
    stats: dict[str, int]
    topics: TopicTable
    store: MessageStore | None
    pipeline: PutPipeline | None
    holds: PullHolds | None
    #: The control channel to the supervisor (one-way notifications such as heartbeats).
    ctl: Connection | None
    #: Decides who gets the local attach info (request 9900).
    attach_guard: AttachGuard
    #: Moves whenever a cached subscription changes (what the C pull path learnt may be stale).
    sub_epoch: int

    async def ctl_call(self, cmd: RemotingCommand, ok: tuple[int, ...] = (0,)) -> RemotingCommand:
        """A request to the supervisor; raises unless the answer's code is in ``ok``."""

    async def fetch_topic(self, topic: str) -> TopicConfig | None:
        """The topic as the supervisor knows it (None when it does not exist)."""

    async def auto_create_topic(self, topic: str, default_topic: str, queue_nums: int,
                                sysflag: int) -> TopicConfig | None:
        """Create ``topic`` from ``default_topic``'s template at the supervisor (None if refused)."""

    async def create_topic(self, tc: TopicConfig) -> None:
        """Create or update a topic at the supervisor and in this worker's copy."""

    def remember_subscription(self, group: str, sub: SubscriptionData) -> None:
        """A subscription this worker saw in a heartbeat on one of its connections."""

    def cached_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """A subscription remembered or fetched recently, else None."""

    def cached_subscription_until(self, group: str, topic: str) -> float:
        """When the cached entry of ``cached_subscription`` expires (``time.monotonic()``), 0.0 if none."""

    async def fetch_subscription(self, group: str, topic: str) -> SubscriptionData | None:
        """The group's subscription to ``topic`` as the supervisor knows it."""


def born_host(conn: Connection) -> tuple[str, int]:
    """The peer as (IPv4, port) for a record's BORNHOST (IPv6 peers become 0.0.0.0: the
    store writes IPv4 hosts only, which is also all ali-ons can decode)."""
    bh = conn.context.get("born")
    if bh is None:
        host, _, port = conn.peer.rpartition(":")
        try:
            socket.inet_aton(host)
        except OSError:
            host = "0.0.0.0"
        bh = conn.context["born"] = (host, int(port) if port.isdigit() else 0)
    return bh
