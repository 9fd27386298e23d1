"""The local path under restarts and kills: local producers and consumers re-attach after a
broker restart without losing anything acknowledged; a local producer killed with SIGKILL
in the middle of its sends harms neither the broker nor the other producers; a real
third-party client consumes what a local producer wrote."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from shmq import Message, Producer
from shmq.errors import ShmqError
from shmq.store import StoreConfig
from shmq.store.verify import verify_store

from .broker_helpers import TEST_SETTINGS, start_broker  # noqa: F401
from .client_helpers import FAST, Collector, consumer, make_topic, wait_route
from ..conftest import REPO
from .conftest import namesrv, node_harness_or_skip, processes, run_ons_client, start_namesrv  # noqa: F401

pytestmark = pytest.mark.crash


def free_port() -> int:
    # the broker also listens on port - 2 (the "VIP channel"): pick a port whose neighbour is free too
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        try:
            with socket.socket() as s2:
                s2.bind(("127.0.0.1", port - 2))
            return port
        except OSError:
            continue
    raise RuntimeError("no free port pair")


def test_broker_restart_under_local_producers_and_consumers(namesrv, start_broker):
    port = free_port()
    b = start_broker(namesrv, settings=FAST, port=port)
    make_topic(b, "R", 4)
    wait_route(namesrv.addr, "R")
    col = Collector()
    c = consumer(namesrv.addr, "rcg", "R", col, local="always")
    acked: list[bytes] = []
    stop = threading.Event()
    errors = []

    def produce(tag):
        with Producer(f"rp-{tag}", namesrv.addr, local="auto") as p:
            i = 0
            while not stop.is_set():
                body = b"%s-%d" % (tag.encode(), i)
                try:
                    p.send(Message("R", body))
                    acked.append(body)
                    i += 1
                except ShmqError as e:  # the broker is restarting: not acknowledged, send again
                    errors.append(type(e).__name__)
                    time.sleep(0.05)
    ts = [threading.Thread(target=produce, args=(t,)) for t in ("a", "b")]
    for t in ts:
        t.start()
    try:
        time.sleep(1.0)
        before = len(acked)
        assert b.stop(timeout=20) == 0
        b2 = start_broker(namesrv, settings=FAST, port=port, store=b.store)
        deadline = time.monotonic() + 30
        while len(acked) < before + 500 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(acked) >= before + 500, "producers did not resume after the restart"
        stop.set()
        for t in ts:
            t.join()
        want = set(acked)
        assert col.wait_for(lambda s: want <= s.bodies(), timeout=60), len(want - col.bodies())
    finally:
        stop.set()
        for t in ts:
            t.join()
        c.shutdown()
    # both producers and the consumer went through the local path again after the restart
    assert b2.alive()
    print(f"restart: {len(acked)} acknowledged, {len(errors)} refused during the restart")


def test_local_producer_killed_mid_send_fifty_times(namesrv, start_broker, tmp_path):
    b = start_broker(namesrv, settings=FAST)
    make_topic(b, "K", 4)
    wait_route(namesrv.addr, "K")
    survivor_acked = []
    stop = threading.Event()

    def survivor():
        with Producer("survivor", namesrv.addr, local="always") as p:
            i = 0
            while not stop.is_set():
                p.send(Message("K", b"s-%d" % i))
                survivor_acked.append(i)
                i += 1
                time.sleep(0.001)  # a steady trickle: what matters is that it never stops
    t = threading.Thread(target=survivor)
    t.start()
    code = (
        "import sys, os, time\n"
        "from shmq import Producer, Message\n"
        "p = Producer('victim', sys.argv[1], local='always').start()\n"
        "i = 0\n"
        "while True:\n"
        "    p.send(Message('K', b'v-%d' % i)); i += 1\n"
        "    if i > 20: time.sleep(0.0005)\n"
        "    if i == 20: print('sending', flush=True)\n"
    )
    try:
        for k in range(50):
            v = subprocess.Popen([sys.executable, "-c", code, namesrv.addr], cwd=REPO, stdout=subprocess.PIPE)
            try:
                assert v.stdout.readline().strip() == b"sending"
                time.sleep(0.005 * (k % 7))
            finally:
                os.kill(v.pid, signal.SIGKILL)
                v.wait()
                v.stdout.close()
        n = len(survivor_acked)
        time.sleep(0.5)
        assert len(survivor_acked) > n, "the surviving producer stopped"
    finally:
        stop.set()
        t.join()
    assert b.alive()
    rep = verify_store(StoreConfig(root=b.store, mapped_file_size_commitlog=TEST_SETTINGS["mappedFileSizeCommitLog"]),
                       None, check_queues=True)
    assert rep.ok, rep.problems[:5]
    col = Collector()
    c = consumer(namesrv.addr, "kcg", "K", col, local="never")
    try:
        want = {b"s-%d" % i for i in survivor_acked}
        assert col.wait_for(lambda s: want <= s.bodies(), timeout=60)
    finally:
        c.shutdown()


def test_third_party_client_reads_what_a_local_producer_wrote(namesrv, start_broker):
    node_harness_or_skip()
    b = start_broker(namesrv, settings=FAST)
    make_topic(b, "Ons", 4)
    wait_route(namesrv.addr, "Ons")
    sent = {}
    with Producer("lp", namesrv.addr, local="always") as p:
        for i in range(50):
            body = ("msg-%d-\u00e9" % i).encode()
            r = p.send(Message("Ons", body, tags=f"tag{i % 3}", keys=[f"key-{i}"]))
            sent[body] = (f"tag{i % 3}", f"key-{i}", r.msg_id)
    lines = run_ons_client("consume", "--namesrv", namesrv.addr, "--topic", "Ons", "--group", "ons-cg",
                           "--count", "50", "--from", "first", "--timeout", "40000", timeout=60)
    got = [l for l in lines if l.get("event") == "message"]
    assert len(got) >= 50, lines[-3:]
    seen = {}
    for m in got:
        seen[m["body"].encode()] = (m.get("tags"), m.get("keys"), m.get("msgId"))
    for body, (tags, key, msg_id) in sent.items():
        assert body in seen, body
        assert seen[body][0] == tags and key in (seen[body][1] or "")
