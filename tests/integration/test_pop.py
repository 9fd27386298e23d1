"""RocketMQ 5 POP over the wire, through shmq's SimpleConsumer and raw requests (2 workers):
messages handed out once per invisible time whichever worker serves the consumer; an ack
settles for good; an unacked message comes back (reconsume_times + 1) after its invisible
time; change_invisible_duration defers it; more consumers than queues share the queues;
after maxReconsumeTimes a message goes to the group's DLQ; a kill -9 of the whole broker
keeps acked messages acked and brings back every unacked one; LITE_PULL_MESSAGE answers as
PULL_MESSAGE; QUERY_ASSIGNMENT follows SET_MESSAGE_REQUEST_MODE."""
from __future__ import annotations

import json
import os
import signal
import threading
import time

import pytest

from shmq import Producer, SimpleConsumer
from shmq.client.message import Message
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import PullMessageRequestHeader

from .broker_helpers import create_topic, pull, send, start_broker  # noqa: F401
from .client_helpers import wait_route
from .conftest import namesrv, processes  # noqa: F401


def _setup(start_broker, namesrv, topic, queues=2, n=0, **settings):
    br = start_broker(namesrv, settings=settings or None)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, topic, queues=queues)
        for i in range(n):
            assert send(c, topic, b"%d" % i, queue_id=i % queues).code == 0
    wait_route(namesrv.addr, topic)
    return br


def _receive_all(sc, want, it=30.0, timeout=20.0):
    got = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += sc.receive(32, invisible_duration=it, await_duration=1.0)
    return got


def test_pop_ack_and_redelivery(start_broker, namesrv):
    _setup(start_broker, namesrv, "PT", n=20)
    with SimpleConsumer("pg1", namesrv.addr).subscribe("PT") as sc:
        got = _receive_all(sc, 20, it=2.0)
        assert sorted(int(m.body) for m in got) == list(range(20))
        assert sc.receive(32, await_duration=0.3) == []          # all invisible now
        sc.ack_batch([m for m in got if int(m.body) % 2 == 0 and int(m.body) < 10])
        for m in got:
            if int(m.body) % 2 == 0 and int(m.body) >= 10:
                sc.ack(m)
        back = _receive_all(sc, 10, it=30.0, timeout=15)
        assert sorted(int(m.body) for m in back) == list(range(1, 20, 2))
        assert all(m.reconsume_times == 1 for m in back)
        assert all(m.topic == "PT" for m in back)
        sc.change_invisible_duration(back[0], 1.0)
        for m in back[1:]:
            sc.ack(m)
        again = _receive_all(sc, 1, timeout=10)
        assert [int(m.body) for m in again] == [int(back[0].body)]
        sc.ack(again[0])
        assert sc.receive(32, await_duration=2.5) == []          # everything acked stays acked


def test_more_consumers_than_queues(start_broker, namesrv):
    _setup(start_broker, namesrv, "PM", queues=2, n=200)
    seen, lock = [], threading.Lock()

    def run(i):
        with SimpleConsumer("pg2", namesrv.addr).subscribe("PM") as sc:
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                msgs = sc.receive(8, await_duration=0.5)
                for m in msgs:
                    sc.ack(m)
                with lock:
                    seen.extend(int(m.body) for m in msgs)
                    if len(seen) >= 200:
                        return

    ts = [threading.Thread(target=run, args=(i,)) for i in range(5)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    assert sorted(seen) == list(range(200))                      # each once, five consumers, two queues


def test_dead_letter_after_max_reconsume(start_broker, namesrv):
    br = _setup(start_broker, namesrv, "PD", queues=1, n=1, maxReconsumeTimes=2)
    with SimpleConsumer("pg3", namesrv.addr).subscribe("PD") as sc:
        times = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(times) < 3:
            for m in sc.receive(1, invisible_duration=0.3, await_duration=1.0):
                times.append(m.reconsume_times)
        assert times == [0, 1, 2]
        assert sc.receive(1, await_duration=1.5) == []
    with SyncRemotingClient(br.addr, timeout=10) as c:
        deadline = time.monotonic() + 5
        while (r := pull(c, "%DLQ%pg3", 0, 0)).code != 0 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert r.code == 0                                       # the dead letter is there


def test_kill_9_keeps_acks_and_brings_back_unacked(start_broker, namesrv):
    br = _setup(start_broker, namesrv, "PK", queues=2, n=100)
    with SimpleConsumer("pg4", namesrv.addr).subscribe("PK") as sc:
        got = _receive_all(sc, 100, it=3.0)
        assert len(got) == 100
        acked = {int(m.body) for m in got if int(m.body) < 60}
        for m in got:
            if int(m.body) in acked:
                sc.ack(m)
    for pid in [br.pid, *br.worker_pids()]:
        os.kill(pid, signal.SIGKILL)
    br.popen.wait(10)
    start_broker(namesrv, store=br.store)
    wait_route(namesrv.addr, "PK")
    with SimpleConsumer("pg4", namesrv.addr).subscribe("PK") as sc:
        back = _receive_all(sc, 40, timeout=30)
        for m in back:
            sc.ack(m)
        back += sc.receive(32, await_duration=4.0)
    assert sorted(int(m.body) for m in back) == list(range(60, 100))


def test_lite_pull_and_assignment(start_broker, namesrv):
    br = _setup(start_broker, namesrv, "PL", queues=2, n=4)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        h = PullMessageRequestHeader(consumerGroup="lg", topic="PL", queueId=0, queueOffset=0, maxMsgNums=8,
                                     sysFlag=4, commitOffset=0, suspendTimeoutMillis=0, subVersion=0, subscription="*")
        r = c.invoke(request(RequestCode.LITE_PULL_MESSAGE, h))
        assert r.code == 0 and r.body
        body = json.dumps({"topic": "PL", "consumerGroup": "ag", "clientId": "c1", "strategyName": "AVG",
                           "messageModel": "CLUSTERING"}).encode()
        a = json.loads(c.invoke(request(RequestCode.QUERY_ASSIGNMENT, body=body)).body)["messageQueueAssignments"]
        assert {x["mode"] for x in a} == {"PULL"}
        m = json.dumps({"topic": "PL", "consumerGroup": "ag", "mode": "POP", "popShareQueueNum": 0}).encode()
        assert c.invoke(request(RequestCode.SET_MESSAGE_REQUEST_MODE, body=m)).code == 0
        a = json.loads(c.invoke(request(RequestCode.QUERY_ASSIGNMENT, body=body)).body)["messageQueueAssignments"]
        assert {(x["mode"], x["messageQueue"]["queueId"]) for x in a} == {("POP", -1)}


@pytest.mark.parametrize("local", ["never", "always"])
def test_timer_and_recall_through_the_python_client(start_broker, namesrv, local):
    _setup(start_broker, namesrv, "PY", queues=1)
    with Producer("tp", namesrv.addr, local=local) as p, SimpleConsumer("pg5", namesrv.addr).subscribe("PY") as sc:
        t0 = time.time()
        keep = p.send(Message("PY", b"keep", delay=1.0))
        gone = p.send(Message("PY", b"gone", deliver_at=int((t0 + 1.0) * 1000)))
        assert keep.recall_handle and gone.recall_handle
        assert p.recall("PY", gone) == gone.msg_id
        got = _receive_all(sc, 1, timeout=10)
        assert [m.body for m in got] == [b"keep"] and time.time() - t0 >= 1.0
        sc.ack(got[0])
        assert sc.receive(8, await_duration=1.5) == []


def test_orderly_pop_holds_the_queue_and_redelivers_in_order(start_broker, namesrv):
    _setup(start_broker, namesrv, "PO", queues=1, n=5)
    with SimpleConsumer("pg6", namesrv.addr, orderly=True).subscribe("PO") as a, \
            SimpleConsumer("pg6", namesrv.addr, orderly=True).subscribe("PO") as b:
        first = a.receive(3, invisible_duration=1.0, await_duration=2.0)
        assert [int(m.body) for m in first] == [0, 1, 2]
        assert b.receive(3, await_duration=0.3) == []            # the queue is held until acked or expired
        a.ack(first[0])
        again = []
        deadline = time.monotonic() + 10
        while not again and time.monotonic() < deadline:
            again = b.receive(3, invisible_duration=30, await_duration=1.0)
        assert [int(m.body) for m in again] == [1, 2, 3]          # from the first unacked, in order
        assert [m.reconsume_times for m in again] == [1, 1, 0]
