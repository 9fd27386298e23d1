"""Master/slave replication on RocketMQ 4.x's HA protocol.

``wire``     the protocol's two messages, defined once
``master``   HAService: accepts slaves, streams them the CommitLog, feeds the replicated
             position SYNC_MASTER putters wait on
``slave``    HAClient: follows a master, reports its offset
``replica``  ReplicaWriter: a slave's received bytes into its CommitLog, ConsumeQueues
             through recovery's dispatch, published as appends are
"""
from .master import HAService
from .slave import HAClient
from .wire import HAProtocolError

__all__ = ["HAService", "HAClient", "HAProtocolError"]
