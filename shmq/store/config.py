"""StoreConfig: the store's settings, named after RocketMQ's MessageStoreConfig keys where one
exists (the broker maps broker.conf keys onto these fields)."""
from __future__ import annotations

import os
from dataclasses import dataclass, field

ASYNC_FLUSH = 0
SYNC_FLUSH = 1
FLUSH_MODES = {"ASYNC_FLUSH": ASYNC_FLUSH, "SYNC_FLUSH": SYNC_FLUSH}

ROLE_ASYNC_MASTER, ROLE_SYNC_MASTER, ROLE_SLAVE = 0, 1, 2
ROLES = {"ASYNC_MASTER": ROLE_ASYNC_MASTER, "SYNC_MASTER": ROLE_SYNC_MASTER, "SLAVE": ROLE_SLAVE}


@dataclass
class StoreConfig:
    root: str                                      # storePathRootDir
    mapped_file_size_commitlog: int = 1 << 30      # mappedFileSizeCommitLog
    cq_entries_per_file: int = 300_000             # mappedFileSizeConsumeQueue / 20
    max_message_size: int = 4 * 1024 * 1024        # maxMessageSize (body bytes)
    flush_disk_type: int = ASYNC_FLUSH             # flushDiskType
    flush_interval_commitlog_ms: int = 500         # flushIntervalCommitLog
    flush_interval_consume_queue_ms: int = 1000    # flushIntervalConsumeQueue
    sync_flush_timeout_ms: int = 5000              # syncFlushTimeout
    file_reserved_time_hours: float = 72           # fileReservedTime
    delete_when: str = "04"                        # deleteWhen: hour(s) of day, "04;16"
    disk_max_used_space_ratio: float = 75          # diskMaxUsedSpaceRatio (percent)
    disk_clean_forcibly_ratio: float = 85          # diskSpaceCleanForciblyRatio (percent)
    clean_interval_s: float = 10                   # cleanResourceInterval
    max_hash_slot_num: int = 5_000_000             # maxHashSlotNum
    max_index_num: int = 20_000_000                # maxIndexNum
    message_index_enable: bool = True              # messageIndexEnable
    queue_capacity: int = 16384                    # slots of the shared topic-queue table
    offset_capacity: int = 8192                    # slots of the shared consumer-offset table
    lock_timeout_ms: int = 5000                    # a live lock holder this slow: LockTimeout
    file_mode: int = 0o600                         # 0o660 with a group
    group: str | None = None                       # group that may map the store (local clients)
    store_host: tuple[str, int] = ("127.0.0.1", 10911)
    broker_role: int = ROLE_ASYNC_MASTER           # brokerRole
    ha_slave_fallbehind_max: int = 256 << 20       # haSlaveFallbehindMax (bytes)
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        self.root = os.path.abspath(self.root)
        if self.mapped_file_size_commitlog < 4096:
            raise ValueError("mappedFileSizeCommitLog must be at least 4096 bytes")
        if self.cq_entries_per_file < 1:
            raise ValueError("ConsumeQueue files need at least one entry")
        if self.group is not None and self.file_mode == 0o600:
            self.file_mode = 0o660

    @property
    def commitlog_dir(self) -> str:
        return os.path.join(self.root, "commitlog")

    @property
    def consumequeue_dir(self) -> str:
        return os.path.join(self.root, "consumequeue")

    @property
    def index_dir(self) -> str:
        return os.path.join(self.root, "index")

    @property
    def config_dir(self) -> str:
        return os.path.join(self.root, "config")
