"""shmq: a RocketMQ-style message broker for one host (shared-memory CommitLog, RocketMQ 4.x remoting)."""
from shmq.errors import ShmqError

__version__ = "0.1.0"

_CLIENT_NAMES = ("Producer", "PushConsumer", "PullConsumer", "Message", "MessageExt", "MessageQueue",
                 "MessageSelector", "SendResult", "SendStatus", "ConsumeResult", "LocalTransactionState",
                 "TransactionProducer", "SimpleConsumer")

__all__ = ["ShmqError", *_CLIENT_NAMES]


def __getattr__(name: str):
    # The client is imported on first use, so `import shmq` (and the broker, which must never
    # import the client) stays light.
    if name in _CLIENT_NAMES:
        import shmq.client as client
        return getattr(client, name)
    raise AttributeError(f"module 'shmq' has no attribute {name!r}")
