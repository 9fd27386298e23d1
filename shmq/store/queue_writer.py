"""QueueWriter: the raw append handle of one queue (``MessageStore.queue_writer``), and the
record-origin fields every append fills (``fill_meta``)."""
from __future__ import annotations

import socket
import struct
import time
from typing import TYPE_CHECKING

from shmq.errors import FlushDiskTimeout
from shmq.native import ffi, lib

from .appender import raise_for_status
from .ha.sync import wait_replicated

if TYPE_CHECKING:
    from .message_store import MessageStore


class QueueWriter:
    """The raw append handle of one queue: ``put(body, props)`` is one cffi call (plus a flush
    wait with SYNC_FLUSH), with the caller's properties bytes stored as given. Not
    thread-safe: use one QueueWriter per thread (they may share a store and a queue; the C
    append serialises them). The put pipeline's writer (``PutPipeline.writer``) builds on it.

    Public fields, for callers that make the C call themselves: ``c_writer`` (shmq_writer *),
    ``slot``, ``meta`` (shmq_meta *: the record's origin, see ``set_origin``), ``out``
    (shmq_result *: where the last append went), ``sync`` (SYNC_FLUSH: wait after a put)."""

    __slots__ = ("store", "topic", "queue_id", "slot", "meta", "out", "c_writer", "sync", "_appender",
                 "_put", "_put_batch", "_ctl", "_timeout")

    def __init__(self, store: "MessageStore", topic: str, queue_id: int, born_host=("127.0.0.1", 0)):
        self.store = store
        self.topic = topic
        self.queue_id = queue_id
        self._appender = store.appender
        self.c_writer = store.appender.w
        self.slot = store.appender.slot(topic, queue_id)
        self.meta = ffi.new("shmq_meta *")
        fill_meta(self.meta, 0, 0, 0, born_host, 0, 0, None, None)  # born_ts 0: now
        self.out = ffi.new("shmq_result *")
        self._put = lib.shmq_put
        self._put_batch = lib.shmq_put_batch
        self.sync = store.sync_wait
        self._ctl = store.cb.ctl
        self._timeout = store._sync_timeout_ns

    def set_origin(self, flag: int, sysflag: int, born_ts: int, born_ip: int, born_port: int,
                   reconsume_times: int) -> None:
        """The record fields of the next puts that come from the sender (born_ts 0: now;
        born_ip the IPv4 address as an int)."""
        m = self.meta
        m.flag = flag
        m.sysflag = sysflag
        m.born_ts = born_ts
        m.born_ip = born_ip
        m.born_port = born_port
        m.reconsume_times = reconsume_times

    def put(self, body: bytes, props: bytes = b"") -> int:
        """Append; returns the queue offset. Limits are checked by the C append."""
        self.put_nowait(body, props)
        if self.sync:
            self.wait_flushed(self.out.end)
        return self.out.queue_offset

    def put_nowait(self, body: bytes, props: bytes = b"") -> int:
        """Append without waiting for SYNC_FLUSH; returns the commit position to pass to
        ``wait_flushed``. Pipelining many puts and then waiting once is how one thread keeps
        many messages in flight under SYNC_FLUSH (one msync confirms them all)."""
        out = self.out
        while True:
            rc = self._put(self.c_writer, self.slot, self.meta, body, len(body), props, len(props), out)
            if rc == 0:
                return out.end
            self._appender.recover(rc, len(body))

    def put_batch(self, batch_body: bytes, extra: bytes = b"") -> tuple[int, int]:
        """Append an encoded batch; returns (first queue offset, count)."""
        self.put_batch_nowait(batch_body, extra)
        if self.sync:
            self.wait_flushed(self.out.end)
        return self.out.queue_offset, self.out.count

    def put_batch_nowait(self, batch_body: bytes, extra: bytes = b"") -> int:
        """``put_batch`` without the confirmation wait; returns the commit position after it."""
        out = self.out
        while True:
            rc = self._put_batch(self.c_writer, self.slot, self.meta, batch_body, len(batch_body), extra, len(extra),
                                 out)
            if rc == 0:
                return out.end
            self._appender.recover(rc, len(batch_body))

    def recover(self, rc: int, size: int) -> None:
        """After a C append answered ``rc``: map what it asked for (the caller calls again) or raise."""
        self._appender.recover(rc, size)

    def wait_flushed(self, end: int) -> None:
        """Block until everything below ``end`` is confirmed: on disk with SYNC_FLUSH
        (FlushDiskTimeout otherwise), on a slave with SYNC_MASTER (ReplicationError)."""
        store = self.store
        if store.sync_flush and lib.shmq_load_i64(ffi.addressof(self._ctl.pos, "flushed_pos")) < end:
            rc = lib.shmq_wait_flushed(self._ctl, end, self._timeout)
            if rc == lib.SHMQ_ETIMEDOUT:
                raise FlushDiskTimeout("not flushed within the sync flush timeout")
            if rc:
                raise_for_status(rc)
        if store.sync_master:
            wait_replicated(self._ctl, end, self._timeout)


def fill_meta(m, flag, sysflag, born_ts, born_host, reconsume, prepared, tag_code, delay_ms) -> None:
    m.flag = flag
    m.sysflag = sysflag
    m.born_ts = int(time.time() * 1000) if born_ts is None else born_ts
    m.born_ip = struct.unpack(">I", socket.inet_aton(born_host[0]))[0]
    m.born_port = born_host[1]
    m.reconsume_times = reconsume
    m.prepared_offset = prepared
    if delay_ms is not None:
        m.tag_mode, m.tag_code = lib.SHMQ_TAG_STORE_PLUS, delay_ms
    elif tag_code is not None:
        m.tag_mode, m.tag_code = lib.SHMQ_TAG_GIVEN, tag_code
    else:
        m.tag_mode, m.tag_code = lib.SHMQ_TAG_FROM_PROPS, 0
