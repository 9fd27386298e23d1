"""The store: CommitLog, ConsumeQueue, IndexFile and the shared control block, over the C core.
``MessageStore`` is the entry point (see message_store.py)."""
from .config import ASYNC_FLUSH, SYNC_FLUSH, StoreConfig
from .message_store import MessageStore, PutResult, QueueWriter
from .reader import GetResult, GetStatus

__all__ = ["MessageStore", "StoreConfig", "PutResult", "QueueWriter", "GetResult", "GetStatus",
           "ASYNC_FLUSH", "SYNC_FLUSH"]
