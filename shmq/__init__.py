"""shmq: a RocketMQ-style message broker for one host (shared-memory CommitLog, RocketMQ 4.x remoting)."""
from shmq.errors import ShmqError

__all__ = ["ShmqError"]
__version__ = "0.1.0"
