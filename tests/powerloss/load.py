"""The load a power-loss run puts on a broker: TCP producers whose every message carries its
id and a checksum of itself (so a torn or half-written record served later is seen), and a
consumer that pulls and commits offsets (so consumerOffset.json has something to lose).
Every SEND_OK is recorded with the monotonic time its answer arrived."""
from __future__ import annotations

import random
import threading
import time
import zlib
from dataclasses import dataclass, field

from shmq.message.record import iter_records
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import (GetMaxOffsetRequestHeader, PullMessageRequestHeader,
                                   QueryConsumerOffsetRequestHeader, SendMessageRequestHeader,
                                   UpdateConsumerOffsetRequestHeader, send_header_to_v2)

TOPIC = "PowerLoss"
GROUP = "powerloss-cg"
QUEUES = 4
SUCCESS = 0


def make_body(mid: int, rng: random.Random) -> bytes:
    """``<id>|<filler>|<crc32 of the rest>``: sizes vary so records straddle pages."""
    filler = rng.randbytes(rng.choice((40, 300, 1500, 5000))).hex().encode()
    head = b"%d|%s|" % (mid, filler)
    return head + b"%08x" % zlib.crc32(head)


def parse_body(body: bytes) -> int | None:
    """The id of a whole, intact message body; None for anything else."""
    head, sep, crc = body.rpartition(b"|")
    if not sep or len(crc) != 8:
        return None
    head += b"|"
    try:
        if int(crc, 16) != zlib.crc32(head):
            return None
        return int(head.split(b"|", 1)[0])
    except ValueError:
        return None


@dataclass
class Acks:
    sent: int = 0
    local: int = 0                               # of ``acked``, from the local producer
    served: set = field(default_factory=set)     # ids a consumer received before the kill
    acked: dict = field(default_factory=dict)   # id -> monotonic time of the SEND_OK
    other: dict = field(default_factory=dict)   # response code -> count (FLUSH_DISK_TIMEOUT...)
    lock: threading.Lock = field(default_factory=threading.Lock)


def send_one(c: SyncRemotingClient, qid: int, body: bytes):
    h = SendMessageRequestHeader(producerGroup="powerloss-pg", topic=TOPIC, defaultTopic="TBW102",
                                 defaultTopicQueueNums=QUEUES, queueId=qid, sysFlag=0,
                                 bornTimestamp=int(time.time() * 1000), flag=0, properties=None)
    return c.invoke(request(RequestCode.SEND_MESSAGE_V2, send_header_to_v2(h), body), 5)


class Producer(threading.Thread):
    """Sends until stopped or the broker is gone; ids are ``base + n``."""

    def __init__(self, addr: str, base: int, acks: Acks, seed: int):
        super().__init__(daemon=True)
        self.addr, self.base, self.acks = addr, base, acks
        self.rng = random.Random(seed)
        self.stop = threading.Event()

    def run(self) -> None:
        try:
            c = SyncRemotingClient(self.addr, timeout=5)
        except OSError:
            return
        n = 0
        try:
            while not self.stop.is_set():
                mid = self.base + n
                n += 1
                with self.acks.lock:
                    self.acks.sent += 1
                r = send_one(c, self.rng.randrange(QUEUES), make_body(mid, self.rng))
                now = time.monotonic()
                with self.acks.lock:
                    if r.code == SUCCESS:
                        self.acks.acked[mid] = now
                    else:
                        self.acks.other[r.code] = self.acks.other.get(r.code, 0) + 1
        except Exception:
            return  # the broker was killed: whatever was not answered is not acked
        finally:
            c.close()


def pull(c: SyncRemotingClient, qid: int, offset: int, commit: int = 0, max_nums: int = 32):
    h = PullMessageRequestHeader(consumerGroup=GROUP, topic=TOPIC, queueId=qid, queueOffset=offset,
                                 maxMsgNums=max_nums, sysFlag=4 | (1 if commit else 0), commitOffset=commit,
                                 suspendTimeoutMillis=0, subVersion=0, subscription="*")
    return c.invoke(request(RequestCode.PULL_MESSAGE, h), 10)


class Consumer(threading.Thread):
    """Pulls every queue from 0 and commits what it has read (UPDATE_CONSUMER_OFFSET);
    ``served`` is the ids of the intact messages it was given."""

    def __init__(self, addr: str):
        super().__init__(daemon=True)
        self.addr = addr
        self.stop = threading.Event()
        self.next = [0] * QUEUES
        self.served: set[int] = set()

    def run(self) -> None:
        try:
            c = SyncRemotingClient(self.addr, timeout=5)
        except OSError:
            return
        try:
            while not self.stop.is_set():
                for q in range(QUEUES):
                    r = pull(c, q, self.next[q])
                    if r.code == SUCCESS and r.body:
                        for m in iter_records(r.body):
                            self.next[q] += 1
                            mid = parse_body(bytes(m.body))
                            if mid is not None:
                                self.served.add(mid)
                    h = UpdateConsumerOffsetRequestHeader(consumerGroup=GROUP, topic=TOPIC, queueId=q,
                                                          commitOffset=self.next[q])
                    c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, h), 5)
                time.sleep(0.01)
        except Exception:
            return
        finally:
            c.close()


def max_offset(c: SyncRemotingClient, qid: int) -> int:
    r = c.invoke(request(RequestCode.GET_MAX_OFFSET, GetMaxOffsetRequestHeader(topic=TOPIC, queueId=qid)), 10)
    return int(r.ext_fields["offset"])


def consumer_offset(c: SyncRemotingClient, qid: int) -> int | None:
    h = QueryConsumerOffsetRequestHeader(consumerGroup=GROUP, topic=TOPIC, queueId=qid)
    r = c.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, h), 10)
    return int(r.ext_fields["offset"]) if r.code == SUCCESS else None


def read_everything(c: SyncRemotingClient):
    """Every message of every queue, from 0 to the max offset: (ids of intact messages,
    bodies that were not intact, max offsets, queue offset holes)."""
    ids: list[int] = []
    garbage: list[bytes] = []
    maxes, holes = [], []
    for q in range(QUEUES):
        hi = max_offset(c, q)
        maxes.append(hi)
        off = 0
        while off < hi:
            r = pull(c, q, off, max_nums=64)
            if r.code != SUCCESS or not r.body:
                nxt = int(r.ext_fields.get("nextBeginOffset", off))
                holes.append((q, off, r.code, nxt))
                if nxt <= off:
                    break
                off = nxt
                continue
            for m in iter_records(r.body):
                mid = parse_body(bytes(m.body))
                if mid is None:
                    garbage.append(bytes(m.body[:64]))
                else:
                    ids.append(mid)
                off = m.queue_offset + 1
    return ids, garbage, maxes, holes
