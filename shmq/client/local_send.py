"""The producer's hot path: plain sends to a topic whose queues all sit on one attached
broker, each one C call (no broker round trip: the producer appends to the shared store itself).
The common one (a body, maybe tags, to a topic this thread has sent to, no SYNC_FLUSH) does
not even come here: ``Producer.send`` calls ``LocalSender.hot`` (native/hot_send.c, LocalSend), which
does what ``LocalSender.send`` does for it in C, on the same per-thread state.

A *plain* message is a ``Message`` (not a subclass) with a body of 1..compress-threshold
bytes, no delay level, flag 0 (a batch carries flags per entry), text without separator
characters and none of ``REWRITE_KEYS`` (what could make ``shmq.message.classify`` answer
anything but PLAIN, and WAIT, CLUSTER, UNIQ_KEY), to a topic that is no retry topic. For it
the pipeline's only change is the CLUSTER pair, so ``shmq_send`` (core_append.c, called with the
GIL held through native/hot_send.c) can draw the UNIQ_KEY, assemble the properties text and append
in one call; the record is byte for byte what the general path stores. Anything else returns None and takes ``Producer``'s
general path, which also raises the precise error.

State is per thread (FastWriters are not thread-safe): ``_topics()`` maps a topic to its
``_LocalTopic``, which has no link when the topic is not eligible; either is built again when
the client's route cache changes. A StaleSegment (the broker restarted) drops the entry and
the link; the general path re-attaches.
"""
from __future__ import annotations

import threading
from typing import NamedTuple

from shmq.errors import FlushDiskTimeout, ReplicationError, ShmqError, StaleSegment
from shmq.message import classify as kinds
from shmq.message.names import CLUSTER, TAGS, UNIQ_KEY, WAIT
from shmq.message.properties import NAME_VALUE_SEP, PROPERTY_SEP, encode_properties
from shmq.native import LocalSend, bind_topic, ffi, hot_send, hot_send_batch, hot_send_message, lib
from shmq.store import validate
from shmq.store.put import FastWriter, Route

from .message import Message, SendResult, SendStatus
from .uniq_id import generator

#: a message carrying one of these takes the general path: the properties that can make it
#: anything but PLAIN (classify), and those the one C call writes itself (CLUSTER, UNIQ_KEY) or
#: must drop (WAIT); a recall marker and the timer service's own mark too
REWRITE_KEYS = kinds.DECISIVE | {WAIT, CLUSTER, UNIQ_KEY, "TIMER_DEL_UNIQKEY", "SHMQ_TIMER_SRC"}
_TAGS_KEY = TAGS + NAME_VALUE_SEP
MAX_BATCH_BYTES = 4 * 1024 * 1024
_SEND_OK = SendStatus.SEND_OK
_UNIQ = generator()
_send = lib.shmq_send
_EBUSY = lib.SHMQ_EBUSY
_unpack = ffi.unpack
_new = ffi.new
_NULL = ffi.NULL


class _Route(NamedTuple):
    """One queue of a topic as one thread sends to it: the queue, its writer, and the
    writer's bound ``shmq_send`` call (FastWriter.route; ``addr`` and ``sync`` repeated from
    it for the hot path)."""
    mq: object
    fw: FastWriter
    addr: int
    sync: bool
    r: Route


class _LocalTopic:
    """One thread's sends to one topic: a FastWriter per queue, used round-robin."""

    __slots__ = ("info", "publish", "link", "writers", "n", "i", "store_host")

    def __init__(self, info, publish, link, writers, store_host: bytes):
        self.info = info                # the TopicPublishInfo this was built from ...
        self.publish = publish          # ... found in this dict (the client's route cache)
        self.link = link
        self.writers = writers          # [_Route], one per queue
        self.n = len(writers)
        self.i = 0
        self.store_host = store_host    # 8 bytes: IPv4 + port, the head of an offset msg id


# LocalSend (hot_send.c) reads and advances these slots, in __slots__ order, for the common send()
bind_topic(_LocalTopic, tuple(_LocalTopic.__dict__[name] for name in _LocalTopic.__slots__), None)


def _head(m: Message) -> bytes | None:
    """The message's properties text as the general path writes it (``wire_properties``:
    user properties, TAGS, KEYS), each pair ending in \\x02; None when its text is not
    acceptable (the general path raises the error)."""
    try:
        m.check_text()
    except ShmqError:
        return None
    props = m.wire_properties()
    return (encode_properties(props) + PROPERTY_SEP).encode() if props else b""


def _tags_head(tags) -> bytes | None:
    """TAGS alone as properties text (the common case, without building a dict); None for
    tags the general path refuses."""
    if tags.__class__ is not str or "\x01" in tags or "\x02" in tags:
        return None
    return (_TAGS_KEY + tags + PROPERTY_SEP).encode()


#: SYNC_MASTER's answers when no slave confirmed (ReplicationError.code), as on TCP
_REPLICATION_STATUS = {11: SendStatus.SLAVE_NOT_AVAILABLE, 12: SendStatus.FLUSH_SLAVE_TIMEOUT}


def _result(t: _LocalTopic, mq, out, ids, ok: bool = True, status=None) -> SendResult:
    """The SendResult of an append whose ids are in ``ids`` and whose offsets are in ``out``
    (formatted when read: see SendResult)."""
    status = status or (_SEND_OK if ok else SendStatus.FLUSH_DISK_TIMEOUT)
    return SendResult(status, _unpack(ids, len(ids)), out.phys_offset,
                      mq, out.queue_offset, None, None, t.store_host)


class LocalSender:
    def __init__(self, producer):
        self.producer = producer
        self._tls = threading.local()   # .topics: the map of every thread but the first sender
        self._first = None              # the first sending thread's ident ...
        self._first_topics = {}         # ... and its map (no threading.local lookup: see hot)
        self._claim = threading.Lock()
        #: Producer.send's first call: the common message to a topic this thread has an entry
        #: for, whole in C (hot_send.c, LocalSend: what send() below does for it); None otherwise
        self.hot = LocalSend(self._tls, producer.compress_over)

    def _topics(self) -> dict:
        """This thread's map of topic -> _LocalTopic. The first thread to send keeps its map
        here, where ``hot`` finds it by thread ident (a thread that reuses a finished thread's
        ident takes over its map: never two threads at once); every other thread's is
        ``_tls.topics``."""
        ident = threading.get_ident()
        if ident == self._first:
            return self._first_topics
        if self._first is None:
            with self._claim:
                if self._first is None:
                    self._first = ident
                    self.hot.own(ident, self._first_topics)
                    return self._first_topics
        try:
            return self._tls.topics
        except AttributeError:
            cache = self._tls.topics = {}
            return cache

    def _topic(self, topic: str):
        """The thread's _LocalTopic for ``topic``, built again when the route changes; None
        when the topic is not eligible (that answer is kept until the route changes too)."""
        cache = self._topics()
        t = cache.get(topic)
        p = self.producer
        info = p.instance.publish.get(topic) if p.instance is not None else None
        if t is None or (info is not None and t.info is not info):
            self._tls.building = topic  # _build's own route fetch calls learn: not twice
            try:
                t = cache[topic] = self._build(topic)
            finally:
                self._tls.building = None
        return t if t.link is not None else None

    def _build(self, topic: str) -> _LocalTopic:
        p = self.producer
        try:
            validate.check_sendable_topic(topic)
            info = p._publish_info(topic)
            if kinds.classify(topic) is kinds.RETRY or info.via_default or not info.queues:
                return self._not_eligible(topic)
            brokers = {q.broker_name for q in info.queues}
            link = p.links.get(next(iter(brokers))) if len(brokers) == 1 else None
            if link is None:  # not attachable, or spread over brokers (the general path balances)
                return self._not_eligible(topic)
            host = (p.instance.client_ip, 0)
            writers = []
            appender = link.store.appender
            for mq in info.queues:
                fw = link.pipeline.fast_writer(topic, mq.queue_id, host)
                r = fw.route(_UNIQ)
                writers.append(_Route(mq, fw, r.addr, r.sync, r))
                # the queue's file mapped and its next page reserved now, not by the first send's
                # append (under the store lock); once per queue of the process's writer
                appender.prepare(fw.plain_call().slot)
            return _LocalTopic(info, p.instance.publish, link, writers, link.store.store_host)
        except ShmqError:
            return self._not_eligible(topic)

    def learn(self, topic: str, info) -> None:
        """The producer fetched ``topic``'s route (``Producer._publish_info``): build this
        thread's entry for it now, off the send path, so the first send to each of its queues
        finds the writer built and the queue's file mapped with its next page ready."""
        if getattr(self._tls, "building", None) == topic:
            return  # this thread is building it (its first send fetched the route): done there
        inst = self.producer.instance
        # only a route the cache holds (else _build's own _publish_info would fetch it again)
        if (info.queues and not info.via_default and inst is not None and inst.publish.get(topic) is info
                and kinds.classify(topic) is not kinds.RETRY):
            self._topic(topic)

    def _not_eligible(self, topic: str) -> _LocalTopic:
        """An entry without a link, tied to what the route cache holds now (None while the
        topic is sent through TBW102): it is looked at again when that changes."""
        inst = self.producer.instance
        publish = inst.publish if inst is not None else {}
        return _LocalTopic(publish.get(topic), publish, None, [], b"")

    def _drop(self, topic: str, t: _LocalTopic) -> None:
        self._topics().pop(topic, None)
        self.producer.links.invalidate(t.link.broker_name)

    # ---- the hot path --------------------------------------------------------------------
    def send(self, msg: Message) -> SendResult | None:
        topic = msg.topic
        try:
            t = self._topics()[topic]
            if t.publish.get(topic) is not t.info:
                raise KeyError(topic)  # the route changed: build again
        except (KeyError, TypeError):
            t = self._topic(topic) if topic.__class__ is str else None
            if t is None:
                return None
        if t.link is None:
            return None
        i = t.i = (t.i + 1) % t.n
        mq, fw, addr, sync, r = t.writers[i]
        # the common message (a body, maybe tags, nothing else): checked and appended in C
        res = hot_send_message(addr, msg, self.producer.compress_over, mq, t.store_host)
        if res.__class__ is SendResult and not sync:
            return res
        if res is None:
            return self._send_plain(msg, t, mq, fw, addr, sync, r)
        # a status (nothing appended), or SYNC_FLUSH to wait for: as _send_plain's append
        head = _tags_head(msg.tags) if msg.tags else b""
        return self._finish(topic, t, mq, fw, r, res, msg.body, head)

    def _send_plain(self, msg: Message, t: _LocalTopic, mq, fw, addr, sync, r) -> SendResult | None:
        """A plain message with properties or keys (or one hot_send_message did not take):
        checked and its head built here, then the same C append."""
        body = msg.body
        if (msg.delay_level or msg.flag or not body or len(body) > self.producer.compress_over
                or msg.__class__ is not Message):
            return None
        props = msg.properties
        if props and not REWRITE_KEYS.isdisjoint(props):
            return None
        if props or msg.keys:
            head = _head(msg)
        elif msg.tags:
            head = _tags_head(msg.tags)
        else:
            head = b""
        if head is None:
            return None  # the general path raises InvalidMessage
        res = hot_send(addr, body, head, mq, t.store_host)  # a SendResult, or a status (int)
        if res.__class__ is int or sync:
            return self._finish(msg.topic, t, mq, fw, r, res, body, head)
        return res

    def _finish(self, topic, t, mq, fw, r: Route, rc, body, head) -> SendResult | None:
        """After ``hot_send`` answered a status or under SYNC_FLUSH: the lock was held (append
        again, the GIL released while waiting), a file to map, a new month, a fence, a full
        disk, or the flush to wait for. None when the broker restarted (the general path)."""
        try:
            if rc.__class__ is not int:
                rc = 0
            elif rc == _EBUSY:
                rc = _send(r.c, body, len(body), head, len(head), 0)
            fw.finish_plain(rc, body, head, _UNIQ, r.id_out)
        except StaleSegment:
            self._drop(topic, t)
            return None
        except FlushDiskTimeout:
            return _result(t, mq, r.out, r.id_out, ok=False)
        except ReplicationError as e:
            return _result(t, mq, r.out, r.id_out, status=_REPLICATION_STATUS[e.code])
        return _result(t, mq, r.out, r.id_out)

    def send_batch(self, msgs: list[Message]) -> SendResult | None:
        m0 = msgs[0]
        topic, tags0 = m0.topic, m0.tags
        limit = self.producer.compress_over
        hot_i = -1  # the writer the C call below tried, if it did
        if msgs.__class__ is list:
            t = self._topic(topic)
            if t is None:
                return None
            head = _tags_head(tags0) if tags0 else b""
            if head is not None:
                i = t.i = (t.i + 1) % t.n
                mq, _, addr, sync, _ = t.writers[i]
                if not sync:
                    # one topic and tags, nothing else: checked, encoded and appended in C
                    res = hot_send_batch(addr, msgs, head, limit, mq, t.store_host)
                    if res.__class__ is SendResult:
                        return res  # else None (not uniform) or a status: the general code below
                    hot_i = i
        uniform = True
        bodies = []
        add = bodies.append
        for m in msgs:
            b = m.body
            if m.topic != topic or m.delay_level or not b or len(b) > limit or m.__class__ is not Message:
                return None
            if m.properties or m.keys or m.flag or m.tags != tags0:
                uniform = False
            add(b)
        t = self._topic(topic)
        if t is None:
            return None
        n = len(msgs)
        lens = list(map(len, bodies))
        if uniform:
            heads = _tags_head(tags0) if tags0 else b""
            if heads is None:
                return None
            head_lens = flags = _NULL
        else:
            for m in msgs:
                if m.properties and not REWRITE_KEYS.isdisjoint(m.properties):
                    return None
            hl = [_head(m) for m in msgs]
            if None in hl:
                return None
            heads = b"".join(hl)
            head_lens = _new("uint32_t[]", list(map(len, hl)))
            fl = [m.flag for m in msgs]
            flags = _new("int32_t[]", fl) if any(fl) else _NULL
        # the encoded batch: 22 bytes of entry header and 41 of UNIQ_KEY pair per message
        size = sum(lens) + n * 63 + (len(heads) if head_lens is not _NULL else n * len(heads))
        if size > MAX_BATCH_BYTES:
            return None  # the general path raises MessageTooLarge with the encoded size
        ids = _new("char[]", 32 * n)
        # After the C call's status, the same writer: its append maps (or creates) the file the C
        # call lacked, waits for the lock, rolls the month. On the next writer instead, the queue
        # that lacked its next ConsumeQueue file kept lacking it until the flush service made it,
        # and every batch the round robin gave it paid two failed opens and this Python path.
        i = hot_i if 0 <= hot_i < t.n else (t.i + 1) % t.n
        t.i = i
        mq, fw, _, _, r = t.writers[i]
        out = r.out
        try:
            fw.put_plain_batch(b"".join(bodies), _new("uint32_t[]", lens), heads, head_lens, flags, n, size,
                               _UNIQ, ids)
        except StaleSegment:
            self._drop(topic, t)
            return None
        except FlushDiskTimeout:
            return _result(t, mq, out, ids, ok=False)
        except ReplicationError as e:
            return _result(t, mq, out, ids, status=_REPLICATION_STATUS[e.code])
        return _result(t, mq, out, ids)
