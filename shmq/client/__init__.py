"""The Python client: producers and consumers over TCP, or straight through the store's shared
memory for a broker on this host (the local transport, shmq.client.local)."""
from .message import (ConsumeResult, LocalTransactionState, Message, MessageExt, MessageQueue,
                      MessageSelector, SendResult, SendStatus)
from .producer import Producer
from .pull_consumer import PullConsumer
from .push_consumer import PushConsumer
from .simple_consumer import SimpleConsumer
from .transaction_producer import TransactionProducer

__all__ = ["Producer", "TransactionProducer", "PushConsumer", "PullConsumer", "SimpleConsumer", "Message", "MessageExt", "MessageQueue",
           "MessageSelector", "SendResult", "SendStatus", "ConsumeResult", "LocalTransactionState"]
