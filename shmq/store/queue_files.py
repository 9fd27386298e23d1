"""ConsumeQueue files made ahead of need, off the send path.

A queue's first file is created when its topic is (``QueueFilePreparer``, a service the broker
supervisor wakes on every topic change and runs every 30 s); the next file of a queue is
created when its writers are in the last eighth of the current one (``prepare_next``, from the
flush service, which looks at every queue that advanced). Both create sparse files
(files.create_sparse): an empty queue costs an inode and a directory, no data block, and the
first message to a queue only maps its file (RocketMQ creates ConsumeQueue files in its
dispatch thread, never in the sender's). A file the preparer has not made yet (a topic just
created, a queue id a service chose) is created by the writer that needs it, as before.
"""
from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable

from shmq.service import ThreadService

from . import files
from .consume_queue import ConsumeQueue

log = logging.getLogger("shmq.store.queue_files")

RESCAN_S = 30.0


def prepare_first(cfg, topic: str, queue_ids: Iterable[int]) -> int:
    """Create the first file of each queue of ``topic`` that has none; returns how many."""
    made = 0
    for q in queue_ids:
        if ConsumeQueue(cfg, topic, q).create_first():
            made += 1
    return made


def prepare_next(cq: ConsumeQueue, next_offset: int) -> bool:
    """Create the file after the one holding ``next_offset`` once the queue is in the last
    eighth of its file (at 300,000 entries a file, 37,500 messages ahead)."""
    fi, n = divmod(next_offset, cq.per_file)
    if n < cq.per_file - cq.per_file // 8:
        return False
    path = cq.path(fi + 1)
    if os.path.exists(path):
        return False
    return files.create_sparse(path, cq.file_bytes, cq.cfg.file_mode, cq.cfg.group)


class QueueFilePreparer(ThreadService):
    """Creates the first ConsumeQueue file of every queue of every topic ``topics()`` lists
    ((topic, queue count) pairs), at start, on ``wake()`` and every RESCAN_S."""

    def __init__(self, cfg, topics: Callable[[], Iterable[tuple[str, int]]]):
        super().__init__("shmq-cq-prepare", RESCAN_S, log=log, first_delay_s=0)
        self.cfg = cfg
        self._topics = topics
        self._done: dict[str, int] = {}  # topic -> queues prepared: a wake looks at new ones only
        self.created = 0

    def run_once(self) -> None:
        for topic, n in list(self._topics()):
            if self.stopping:
                return
            have = self._done.get(topic, 0)
            if n > have:
                self.created += prepare_first(self.cfg, topic, range(have, n))
                self._done[topic] = n
