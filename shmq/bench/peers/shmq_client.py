"""shmq through its public client API (shmq.client), against a broker this run started:
``Producer(group, namesrv=..., local=...)`` with ``send`` / ``send_batch``, and
``PushConsumer(group, namesrv=..., model="CLUSTERING")`` with an ``on_message`` listener
(consume batches of up to 32, reading from the first offset of a fresh topic).

``--transport local`` runs the clients with ``local="always"`` (they must attach to the
store's shared memory: a failure to attach is an error, never a silent TCP run);
``--transport tcp`` with ``local="never"`` (RocketMQ remoting over loopback). The broker's
processes (supervisor and workers) count as "broker" CPU. Rows degrade to a note when the
client is not exported by ``shmq`` or the broker cannot start.
"""
from __future__ import annotations

import itertools
import os
import time

from shmq.message.names import PERM_RW, TBW102

from .base import FuncSender, Peer

_topics = itertools.count()


def client_missing() -> str | None:
    try:
        from shmq import ConsumeResult, Message, Producer, PushConsumer  # noqa: F401
    except (ImportError, AttributeError) as e:
        return f"the shmq client API is not available yet ({e})"
    return None


class ShmqClientPeer(Peer):
    name = "shmq"
    description = "shmq Producer / PushConsumer (public API) through a shmq-broker started for the run"
    is_shmq = True
    durable = True

    def __init__(self):
        self._flush = "ASYNC_FLUSH"
        self._env = None

    def skip_reason(self, sc, env):
        return client_missing() or super().skip_reason(sc, env)

    def setup(self, sc, env, tmpdir):
        self._env = env
        self._flush = "SYNC_FLUSH" if sc.durable else "ASYNC_FLUSH"
        ns = env.namesrv()
        broker = env.broker(self._flush)
        topic = f"Bench{os.getpid()}x{next(_topics)}"
        queues = max(4, sc.group_of(0)[2], sc.producers)
        create_topic(broker, ns, topic, queues)
        return {"namesrv": ns, "topic": topic, "group": f"bench-{topic}",
                "local": "always" if sc.transport == "local" else "never"}

    def service_pids(self):
        return self._env.broker_pids(self._flush) if self._env else []

    @classmethod
    def open_sender(cls, ch, sc, idx):
        from shmq import Message, Producer
        # SHMQ_BENCH_COMPRESS_OVER: the client's compressMsgBodyOverHowmuch (default 4 KiB, as
        # RocketMQ's; the bench bodies are all 'x', so a compressed run measures zlib)
        over = os.environ.get("SHMQ_BENCH_COMPRESS_OVER")
        kw = {"compress_msg_body_over": int(over)} if over else {}
        p = Producer(f"{ch['group']}-p{idx}", namesrv=ch["namesrv"], local=ch["local"], **kw)
        p.start()
        topic = ch["topic"]
        if sc.send_mode == "async":
            return _AsyncWindow(p, topic, sc.send_window)
        if sc.send_mode == "oneway":
            oneway = p.send_oneway
            return FuncSender(lambda body: oneway(Message(topic, body)), None, p.shutdown)
        send, send_batch = p.send, p.send_batch
        return FuncSender(lambda body: send(Message(topic, body)),
                          lambda bodies: send_batch([Message(topic, b) for b in bodies]), p.shutdown)

    @classmethod
    def open_receiver(cls, ch, sc, idx):
        return _PushReceiver(ch, sc, idx)


class _AsyncWindow:
    """``--send-mode async``: each call hands its message (or batch) to ``send_async``
    (``send_batch_async``) and returns; at most ``window`` are unanswered, the oldest waited
    for before another goes (a bounded window, as an application caps its in-flight sends).
    Answered sends are collected as they finish so that a failed one fails the run at once;
    ``drain`` (the engine, after the send loop) waits for the rest."""

    TIMEOUT_S = 30.0

    def __init__(self, producer, topic: str, window: int):
        import collections

        from shmq import Message
        self._p = producer
        self._q = collections.deque()  # unanswered SendFutures, oldest first
        self._window = window
        send_async, send_batch_async = producer.send_async, producer.send_batch_async
        push, reap = self._q.append, self._reap

        def send(body):
            push(send_async(Message(topic, body)))
            reap()

        def send_batch(bodies):
            push(send_batch_async([Message(topic, b) for b in bodies]))
            reap()

        self.send, self.send_batch = send, send_batch

    def _reap(self) -> None:
        q = self._q
        while q and (len(q) > self._window or q[0].done()):
            q.popleft().result(self.TIMEOUT_S)  # raises the send's error

    def drain(self) -> None:
        q = self._q
        while q:
            q.popleft().result(self.TIMEOUT_S)

    def close(self) -> None:
        self._p.shutdown()


class _PushReceiver:
    """The consumer starts (route, rebalance, first pulls) while the run gets ready; its
    listener holds every delivery until ``start`` hands it the harness's ``handle`` (at the
    start instant: a pull backlog is not consumed early, and no startup cost lands in the
    measured window)."""

    def __init__(self, ch, sc, idx):
        import threading

        from shmq import ConsumeResult, PushConsumer
        self._go = threading.Event()
        self._handle = None
        success = ConsumeResult.SUCCESS

        clock = time.monotonic_ns

        def listener(msgs):
            # the latency ends when the listener is called (the clock is read first, as a
            # receive loop reads it when its receive call returns); taking the bodies out of
            # the MessageExt objects and the harness's lock come after it
            now = clock()
            if self._handle is None:
                self._go.wait()
                now = clock()
            self._handle([m.body for m in msgs], now)
            return success

        # local: the listener runs in the thread that reads the mapped store (consume_threads=0),
        # the low-latency configuration, spinning SHMQ_BENCH_SPIN_US before sleeping on the
        # store's futex (as the store peer does; a spin of a second or more is busy-polling);
        # TCP: the default consume pool
        spin = float(os.environ.get("SHMQ_BENCH_SPIN_US", "50")) / 1e6
        group = ch["group"] if sc.groups == 1 else f"{ch['group']}-g{sc.group_of(idx)[0]}"
        c = PushConsumer(group, namesrv=ch["namesrv"], model="CLUSTERING", local=ch["local"],
                         consume_from="FIRST_OFFSET", consume_batch_size=32, rebalance_interval=1.0,
                         consume_threads=0 if ch["local"] == "always" else 20, spin_s=spin,
                         idle_wait_s=max(0.5, spin))
        c.subscribe(ch["topic"], "*")
        c.on_message(listener)
        c.start()
        self.consumer = c

    def start(self, handle) -> None:
        self._handle = handle
        self._go.set()

    def close(self) -> None:
        if self._handle is None:
            self._handle = lambda bodies: None
        self._go.set()
        self.consumer.shutdown()


def create_topic(broker: str, namesrv: str, topic: str, queues: int, timeout: float = 15.0) -> None:
    """UPDATE_AND_CREATE_TOPIC on the broker, then wait until the NameServer routes it."""
    from shmq.protocol import RequestCode, SyncRemotingClient, request
    from shmq.protocol.headers import CreateTopicRequestHeader
    h = CreateTopicRequestHeader(topic=topic, defaultTopic=TBW102, readQueueNums=queues, writeQueueNums=queues,
                                 perm=PERM_RW, topicFilterType="SINGLE_TAG")
    with SyncRemotingClient(broker, timeout=5) as c:
        r = c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h))
        if r.code != 0:
            raise RuntimeError(f"create topic {topic}: code {r.code} {r.remark}")
    deadline = time.monotonic() + timeout
    with SyncRemotingClient(namesrv, timeout=5) as c:
        while c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)).code != 0:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the NameServer has no route for {topic} after {timeout:.0f} s")
            time.sleep(0.05)
