"""The topic table: ``config/topics.json`` in RocketMQ's shape (``TopicConfigManager``).

::

    {"dataVersion":{"counter":3,"timestamp":1700000000000},
     "topicConfigTable":{"T":{"order":false,"perm":6,"readQueueNums":4,"topicFilterType":"SINGLE_TAG",
                               "topicName":"T","topicSysFlag":0,"writeQueueNums":4}}}

Single writer: the supervisor owns the file and is the only process that changes the table
(creations and deletions arrive from workers over the control channel). Every change bumps
the data version, is written atomically (temp file, fsync, rename) and is then pushed to
every worker, which replaces its in-memory copy. Invariant: a worker's copy is never newer
than the file, and a topic a worker does not know is asked for at the supervisor before the
worker answers TOPIC_NOT_EXIST, so a creation on one worker is never denied by another.
"""
from __future__ import annotations

import json
import logging
import os
import time

import msgspec

from shmq.message.names import (OFFSET_MOVED_EVENT, PERM_INHERIT, PERM_RW, RETRY_PREFIX, SCHEDULE_TOPIC, SELF_TEST_TOPIC,
                                TBW102)
from shmq.protocol.bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper, decode_json
from shmq.store import files

log = logging.getLogger("shmq.broker.topics")

FILE = "topics.json"


def queue_count(tc: TopicConfig) -> int:
    """A send may name the queue ids 0 .. this - 1 (SendMessageProcessor's range check: the
    larger of the write and read queue counts). The Python send path checks it, and the C path
    is given it for a learnt topic (processors/send_fast.py)."""
    return max(tc.writeQueueNums, tc.readQueueNums)


class TopicTable:
    """Topic configs by name plus the data version. ``path`` None: memory only (workers)."""

    def __init__(self, path: str | None = None):
        self.path = path
        self.table: dict[str, TopicConfig] = {}
        self.version = DataVersion(timestamp=int(time.time() * 1000), counter=0)

    # ---- reading ---------------------------------------------------------------------------
    def get(self, topic: str) -> TopicConfig | None:
        return self.table.get(topic)

    def __contains__(self, topic: str) -> bool:
        return topic in self.table

    def names(self) -> list[str]:
        return sorted(self.table)

    def wrapper(self) -> TopicConfigSerializeWrapper:
        return TopicConfigSerializeWrapper(topicConfigTable=dict(self.table), dataVersion=self.version)

    def encode(self) -> bytes:
        """The topics.json text (also what the supervisor pushes to workers)."""
        return msgspec.json.encode(self.wrapper(), order="sorted")

    def replace(self, data: bytes) -> None:
        """Adopt a table the supervisor pushed (workers). A topic whose config is unchanged keeps
        its TopicConfig object: the worker's C send path serves a queue only under the very
        object it learnt it with (``tc is``, native/remoting_send.c), so a new object for every
        topic whenever any topic is created sent every learnt queue's next send through the
        Python path once more. The objects are never changed in place, so keeping one is keeping
        its value."""
        w = decode_json(data, TopicConfigSerializeWrapper)
        old = self.table
        self.table = {name: (prev if (prev := old.get(name)) == tc else tc)
                      for name, tc in w.topicConfigTable.items()}
        self.version = w.dataVersion

    def load(self) -> None:
        if self.path is None:
            return
        try:
            with open(self.path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return
        try:
            self.replace(data)
        except Exception as e:  # a damaged file must not keep the broker down
            log.error("%s does not parse (%s); starting from the default topics", self.path, e)

    # ---- writing (supervisor only) -----------------------------------------------------------
    def _changed(self, undo: dict[str, TopicConfig | None]) -> None:
        """Bump the version and write the file. A failed write (a full disk) puts back the
        entries ``undo`` names as they were (None: absent) and the version, then re-raises: the
        table in memory never holds what topics.json does not (else a retry would find
        "nothing changed" and never write it)."""
        old_version = self.version
        self.version = DataVersion(timestamp=int(time.time() * 1000), counter=old_version.counter + 1)
        try:
            self.persist()
        except BaseException:
            self.version = old_version
            for name, tc in undo.items():
                if tc is None:
                    self.table.pop(name, None)
                else:
                    self.table[name] = tc
            raise

    def persist(self) -> None:
        if self.path is not None:
            files.write_atomic(self.path, self.encode(), 0o600)  # read by the broker alone

    def put(self, tc: TopicConfig) -> bool:
        """Create or update; returns whether anything changed (then persisted)."""
        old = self.table.get(tc.topicName)
        if old == tc:
            return False
        self.table[tc.topicName] = tc
        self._changed({tc.topicName: old})
        log.info("topic %s %s: read %d write %d perm %d", tc.topicName, "updated" if old else "created",
                 tc.readQueueNums, tc.writeQueueNums, tc.perm)
        return True

    def put_many(self, tcs: list[TopicConfig]) -> bool:
        undo: dict[str, TopicConfig | None] = {}
        for tc in tcs:
            old = self.table.get(tc.topicName)
            if old != tc:
                undo.setdefault(tc.topicName, old)
                self.table[tc.topicName] = tc
        if undo:
            self._changed(undo)
        return bool(undo)

    def delete(self, topic: str) -> bool:
        old = self.table.pop(topic, None)
        if old is None:
            return False
        self._changed({topic: old})
        log.info("topic %s deleted", topic)
        return True


def default_topics(cluster: str, broker_name: str, auto_create: bool, default_queues: int) -> list[TopicConfig]:
    """The topics a RocketMQ broker creates at start (TopicConfigManager's constructor)."""
    rw = PERM_RW
    out = [
        TopicConfig(topicName=SELF_TEST_TOPIC, readQueueNums=1, writeQueueNums=1, perm=rw),
        TopicConfig(topicName=OFFSET_MOVED_EVENT, readQueueNums=1, writeQueueNums=1, perm=rw),
        TopicConfig(topicName=SCHEDULE_TOPIC, readQueueNums=18, writeQueueNums=18, perm=rw),
        TopicConfig(topicName=broker_name, readQueueNums=1, writeQueueNums=1, perm=rw | PERM_INHERIT),
        TopicConfig(topicName=f"{cluster}_REPLY_TOPIC", readQueueNums=1, writeQueueNums=1, perm=rw),
    ]
    if auto_create:
        out.append(TopicConfig(topicName=TBW102, readQueueNums=default_queues, writeQueueNums=default_queues,
                               perm=rw | PERM_INHERIT))
    return out


def derive_from_default(topic: str, default: TopicConfig | None, requested_queues: int,
                        sysflag: int = 0) -> TopicConfig | None:
    """The config a send to an unknown ``topic`` creates from its ``defaultTopic``
    (``createTopicInSendMessageMethod``): only when the default has PERM_INHERIT; queues =
    min(requested, the default's write queues); perm without INHERIT. A %RETRY% topic
    falls back to one queue."""
    if default is not None and default.perm & PERM_INHERIT:
        q = max(1, min(requested_queues, default.writeQueueNums))
        return TopicConfig(topicName=topic, readQueueNums=q, writeQueueNums=q,
                           perm=default.perm & ~PERM_INHERIT, topicSysFlag=sysflag)
    if topic.startswith(RETRY_PREFIX):
        return TopicConfig(topicName=topic, readQueueNums=1, writeQueueNums=1, perm=PERM_RW)
    return None


def to_json_dict(tc: TopicConfig) -> dict:
    return json.loads(msgspec.json.encode(tc))


def config_path(store_root: str) -> str:
    return os.path.join(store_root, "config", FILE)
