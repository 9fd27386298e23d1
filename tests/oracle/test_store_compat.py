"""Store compatibility both ways: a store directory written by shmq is opened by Apache RocketMQ
4.9.7's broker, which serves every message (and the committed consumer offsets, and finds
messages by key); a store written by Apache RocketMQ (clean shutdown) is opened by shmq, which
does the same.
"""
from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from shmq import Message, Producer
from shmq.protocol import RequestCode as R
from shmq.protocol import SyncRemotingClient, request
from shmq.protocol.headers import PullMessageRequestHeader
from shmq.store.segment_gc import collect
from tests.integration.broker_helpers import BROKER_READY, TEST_SETTINGS
from tests.integration.conftest import NAMESRV_READY, Proc, start_process
from tests.thirdparty import rocketmq_server as rmq

from .conftest import Target, unique
from .differential import iter_records

#: file sizes both brokers must agree on to share a store
SIZES = {"mappedFileSizeCommitLog": 256 * 1024, "mappedFileSizeConsumeQueue": 1000 * 20,
         "maxHashSlotNum": 4096, "maxIndexNum": 65536}
QUEUES = 4
N = 300  # messages: several CommitLog files of 256 KiB with 3 KiB bodies (not compressed)


@pytest.fixture
def home(tmp_path):
    rmq.require_server_classpath()
    return rmq.RocketMQHome(tmp_path / "rmq-home")


@pytest.fixture
def stack(tmp_path, home):
    """start(kind, store) -> (Target, stop); everything started is stopped at teardown."""
    started: list = []

    def shmq_namesrv() -> str:
        ns = start_process([sys.executable, "-m", "shmq.cli.namesrv", "--port", "0"], NAMESRV_READY,
                           tmp_path / f"ns-{len(started)}.log")
        started.append(ns)
        return f"127.0.0.1:{ns.match.group(1)}"

    ns_addr = shmq_namesrv()

    def start(kind: str, store: Path, name: str = "compat-broker"):
        if kind == "apache":
            br = rmq.start_broker(home, ns_addr, store, brokerName=name, brokerClusterName="CompatCluster", **SIZES)
            addr = br.addr
        else:
            argv = [sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(store),
                    "--workers", "1", "--namesrv", ns_addr]
            for k, v in {**TEST_SETTINGS, **SIZES, "brokerName": name, "brokerClusterName": "CompatCluster"}.items():
                argv += ["--set", f"{k}={v}"]
            br = start_process(argv, BROKER_READY, tmp_path / f"broker-{len(started)}.log", timeout=30)
            addr = f"127.0.0.1:{br.match.group(1)}"
            rmq.wait_registered(ns_addr, name, addr, timeout=30)
        started.append(br)
        return Target(kind, ns_addr, addr, name, "CompatCluster"), br

    yield start
    for p in reversed(started):
        p.stop()


def write_messages(t: Target, topic: str, group: str) -> dict[int, int]:
    """N messages with keys over QUEUES queues; the group commits part of each queue. Returns
    {queue id: committed offset}."""
    t.create_topic(topic, QUEUES)
    with Producer(unique("pg"), t.namesrv, local="never") as p:
        for i in range(N):
            r = p.send(Message(topic, b"%05d" % i + b"." * 3000, keys=[f"key-{i}"], tags=f"t{i % 3}"))
            assert r.queue is not None
    committed = {q: 10 + q for q in range(QUEUES)}
    with t.client() as c:
        for q, off in committed.items():
            r = c.invoke(request(R.UPDATE_CONSUMER_OFFSET, consumerGroup=group, topic=topic, queueId=q,
                                 commitOffset=off))
            assert r.code == 0, r.remark
    return committed


def read_everything(t: Target, topic: str, group: str) -> tuple[list[bytes], dict[int, int]]:
    """Every message of the topic, pulled queue by queue from offset 0, and the group's offsets."""
    bodies, offsets = [], {}
    with t.client(timeout=10) as c:
        for q in range(QUEUES):
            off = 0
            while True:
                h = PullMessageRequestHeader(consumerGroup=group + "_reader", topic=topic, queueId=q,
                                             queueOffset=off, maxMsgNums=32, sysFlag=4, commitOffset=0,
                                             suspendTimeoutMillis=0, subVersion=0, subscription="*")
                r = c.invoke(request(R.PULL_MESSAGE, h))
                if r.code != 0:
                    break
                msgs = list(iter_records(r.body))
                assert [m.queue_offset for m in msgs] == list(range(off, off + len(msgs)))
                bodies += [bytes(m.body[:5]) for m in msgs]
                off = int(r.ext_fields["nextBeginOffset"])
            r = c.invoke(request(R.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=topic, queueId=q))
            offsets[q] = int(r.ext_fields["offset"]) if r.code == 0 else None
    return bodies, offsets


def find_by_key(t: Target, topic: str, key: str) -> list[bytes]:
    with t.client() as c:
        r = c.invoke(request(R.QUERY_MESSAGE, topic=topic, key=key, maxNum=32, beginTimestamp=0,
                             endTimestamp=int(time.time() * 1000) + 60_000))
    return [bytes(m.body[:5]) for m in iter_records(r.body)] if r.code == 0 else []


@pytest.mark.parametrize("writer,reader,crash", [
    ("shmq", "apache", False), ("apache", "shmq", False),
    ("shmq", "apache", True), ("apache", "shmq", True),
], ids=["shmq-to-apache", "apache-to-shmq", "shmq-killed-to-apache", "apache-killed-to-shmq"])
def test_a_store_moves_between_brokers(stack, tmp_path, writer, reader, crash):
    """Clean: the writer shuts down (no abort file left). Crash: the writer is killed -9 after
    its offsets had time to be persisted; the reader recovers like after its own crash."""
    store = tmp_path / "store"
    topic, group = unique("Moved"), unique("moved_cg")
    w, wproc = stack(writer, store)
    committed = write_messages(w, topic, group)
    deadline = time.monotonic() + 15  # RocketMQ fills its ConsumeQueues in a background thread
    while True:
        written, _ = read_everything(w, topic, group)
        if len(written) >= N or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(written) == [b"%05d" % i for i in range(N)]
    if crash:
        # offsets reach config/consumerOffset.json every flushConsumerOffsetInterval (Apache:
        # first after 10 s); a kill before that loses them on either broker
        deadline = time.monotonic() + 30
        path = store / "config" / "consumerOffset.json"
        while not (path.exists() and group in path.read_text()) and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)  # and the CommitLog/ConsumeQueue flushers have run once more
        os.kill(wproc.pid, signal.SIGKILL)
        wproc.stop()
        assert (store / "abort").exists()
    else:
        wproc.stop()
        assert not (store / "abort").exists(), f"{writer} left its abort file"

    r, _ = stack(reader, store)
    served, offsets = read_everything(r, topic, group)
    assert sorted(served) == sorted(written)
    assert offsets == committed
    for i in (0, N // 2, N - 1):
        assert find_by_key(r, topic, f"key-{i}") == [b"%05d" % i]
    with Producer(unique("pg"), r.namesrv, local="never") as p:  # and the reader writes on after it
        assert p.send(Message(topic, b"after the move")).queue is not None
    if writer == "shmq" and crash:
        # the killed shmq broker's control block: no shmq broker opens this store again to fence
        # it, so it would stay in /dev/shm until a later start's sweep finds the directory gone
        assert [s.action for s in collect(existing=True, under=str(store))] == ["removed"]


def test_one_store_one_broker(stack, tmp_path):
    """The store lock keeps the other kind of broker out, both ways (shmq takes RocketMQ's POSIX
    lock on store/lock besides its own flock)."""
    store = tmp_path / "store"
    _, sproc = stack("shmq", store)
    with pytest.raises(RuntimeError, match="Lock failed"):
        stack("apache", store, name="intruder")
    sproc.stop()
    _, aproc = stack("apache", store)
    with pytest.raises(RuntimeError, match="store/lock is held"):
        stack("shmq", store, name="intruder")
    aproc.stop()
