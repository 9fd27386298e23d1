"""A worker killed with SIGKILL under load is restarted and loses no acknowledged message; a
consumer that vanishes without unregistering is dropped after the (shortened) expiry and its
queues go to the rest of the group."""
from __future__ import annotations

import os
import signal
import threading
import time

import psutil

from shmq.errors import RemotingError
from shmq.message.record import iter_records
from shmq.protocol import SyncRemotingClient
from shmq.store import StoreConfig
from shmq.store.verify import verify_store

from .broker_helpers import TEST_SETTINGS, clients_on_two_workers, create_topic, pull, send, start_broker  # noqa: F401
from .conftest import processes, start_namesrv  # noqa: F401
from .test_broker_alions import Ons, ons_procs, produce, wait_members, wait_route  # noqa: F401


def _producer(addr: str, topic: str, tag: str, acked: list[bytes], stop: threading.Event, errors: list) -> None:
    c = None
    i = 0
    while not stop.is_set():
        body = f"{tag}-{i}".encode()
        try:
            if c is None:
                c = SyncRemotingClient(addr, timeout=5)
            r = send(c, topic, body, queue_id=i % 4)
            if r.code == 0:
                acked.append(body)
            else:
                errors.append((r.code, r.remark))
            i += 1
        except RemotingError:
            # The connection died with its worker: reconnect (SO_REUSEPORT sends it to a live one).
            if c is not None:
                c.close()
            c = None
            time.sleep(0.01)
    if c is not None:
        c.close()


def test_kill_9_worker_under_load(start_broker):
    br = start_broker(workers=2)
    with SyncRemotingClient(br.addr) as c:
        assert create_topic(c, "Crash", queues=4).code == 0
    pids = br.worker_pids()
    assert len(pids) == 2
    stop = threading.Event()
    acked: list[list[bytes]] = [[] for _ in range(4)]
    errors: list = []
    threads = [threading.Thread(target=_producer, args=(br.addr, "Crash", f"p{n}", acked[n], stop, errors))
               for n in range(4)]
    for t in threads:
        t.start()
    time.sleep(1.0)
    os.kill(pids[0], signal.SIGKILL)
    deadline = time.monotonic() + 15
    while True:  # the supervisor restarts it
        now = br.worker_pids()
        if len(now) == 2 and pids[0] not in now:
            break
        assert time.monotonic() < deadline, f"worker not restarted: {now}"
        time.sleep(0.05)
    before = sum(map(len, acked))
    time.sleep(1.0)
    stop.set()
    for t in threads:
        t.join(10)
    assert sum(map(len, acked)) > before, "sends go on after the restart"
    assert not errors, errors[:5]
    # every acknowledged message is there
    stored: set[bytes] = set()
    with SyncRemotingClient(br.addr, timeout=10) as c:
        for q in range(4):
            off = 0
            while True:
                r = pull(c, "Crash", q, off)
                if r.code != 0:
                    break
                stored.update(bytes(m.body) for m in iter_records(r.body))
                off = int(r.ext_fields["nextBeginOffset"])
    missing = [b for a in acked for b in a if b not in stored]
    assert not missing, f"{len(missing)} acknowledged messages lost, e.g. {missing[:3]}"
    assert br.stop(timeout=20) == 0
    rep = verify_store(StoreConfig(root=br.store, mapped_file_size_commitlog=TEST_SETTINGS["mappedFileSizeCommitLog"]))
    assert rep.ok, rep.problems[:5]


def test_vanished_consumer_expires_and_its_queues_go_to_the_others(start_namesrv, start_broker, tmp_path, ons_procs):
    ns = start_namesrv()
    br = start_broker(namesrv=ns, settings={"channelExpiredTimeout": 3000, "clientScanInterval": 300})
    with SyncRemotingClient(br.addr) as c:
        assert create_topic(c, "Exp", queues=4).code == 0
    wait_route(ns.addr, "Exp")
    cs = [Ons("consume", "--namesrv", ns.addr, "--topic", "Exp", "--group", "exp_cg", "--count", "100000",
              "--timeout", "600000", "--heartbeat", "500", log_path=tmp_path / f"exp-{i}.log") for i in range(2)]
    ons_procs.extend(cs)
    wait_members(br.addr, "exp_cg", 2)
    # The second consumer vanishes: stopped, its socket still open, no unregister, no heartbeat.
    os.kill(cs[1].p.pid, signal.SIGSTOP)
    try:
        t0 = time.monotonic()
        wait_members(br.addr, "exp_cg", 1, timeout=20)
        assert time.monotonic() - t0 >= 2.0, "dropped by the expiry, not before"
        time.sleep(2.5)  # the survivor was notified and rebalances (every second in the harness)
        produce(ns, "Exp", 200, "x", tmp_path, ons_procs)
        deadline = time.monotonic() + 30
        while {m["body"] for m in cs[0].messages()} != {f"x-{i}" for i in range(200)}:
            assert time.monotonic() < deadline, "the survivor did not get every queue"
            time.sleep(0.1)
        assert {m["queueId"] for m in cs[0].messages()} == {0, 1, 2, 3}
    finally:
        if psutil.pid_exists(cs[1].p.pid):
            os.kill(cs[1].p.pid, signal.SIGKILL)


def test_a_dead_workers_consumers_leave_their_group_at_once(start_broker):
    import json

    from shmq.errors import RemotingTimeout
    from shmq.protocol import RequestCode, request
    from shmq.protocol.bodies import KVTable, decode_json

    br = start_broker(workers=2)
    a, b = clients_on_two_workers(br.addr)
    try:
        hb = lambda cid: json.dumps({"clientID": cid, "consumerDataSet": [
            {"groupName": "wg", "subscriptionDataSet": [{"topic": "WT", "subString": "*"}]}]}).encode()
        assert a.invoke(request(RequestCode.HEART_BEAT, body=hb("ca"))).code == 0
        assert b.invoke(request(RequestCode.HEART_BEAT, body=hb("cb"))).code == 0
        pid_b = int(decode_json(b.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).body, KVTable).table["shmqWorkerPid"])
        try:  # drain the join notifications
            while True:
                a.receive(0.3)
        except RemotingTimeout:
            pass
        os.kill(pid_b, signal.SIGKILL)
        n = a.receive(5)  # told at once, long before any expiry (120 s by default)
        assert n.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and n.ext_fields["consumerGroup"] == "wg"
        r = a.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="wg"))
        assert json.loads(r.body)["consumerIdList"] == ["ca"]
    finally:
        a.close()
        b.close()
