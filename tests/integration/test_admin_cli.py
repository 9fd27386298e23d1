"""The ``shmq`` admin subcommands against a live NameServer and broker."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from shmq import Message, Producer

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import Collector, consumer, wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401


def shmq(*args, ok=True) -> str:
    r = subprocess.run([sys.executable, "-m", "shmq.cli.main", *args], capture_output=True, text=True, timeout=60)
    if ok:
        assert r.returncode == 0, r.stderr
    return r.stdout


def test_topics_cluster_progress_query_view(namesrv, start_broker):
    b = start_broker(namesrv)
    ns = ["-n", namesrv.addr]
    assert "created Adm (3 queues)" in shmq("topic", "create", "Adm", "-q", "3", *ns)
    wait_route(namesrv.addr, "Adm")
    assert "Adm" in shmq("topic", "list", *ns).split()
    route = json.loads(shmq("topic", "route", "Adm", *ns))
    assert route["queueDatas"][0]["readQueueNums"] == 3
    out = shmq("cluster", "list", *ns)
    assert b.addr in out and "DefaultCluster" in out
    with Producer("adm-p", namesrv.addr) as p:
        sent = [p.send(Message("Adm", b"body-%d" % i, keys=[f"order-{i % 4}"])) for i in range(12)]
    col = Collector()
    c = consumer(namesrv.addr, "adm-g", "Adm", col)
    try:
        assert col.wait_for(lambda s: len(s.msgs) >= 12)
        time.sleep(1.5)  # offsets are committed every persist interval
    finally:
        c.shutdown()
    progress = shmq("consumer", "progress", "adm-g", "Adm", *ns)
    assert "total lag: 0" in progress
    time.sleep(1.2)  # the index lags the append by up to a flush
    lines = shmq("message", "query", "--topic", "Adm", "--key", "order-1", *ns).strip().splitlines()
    assert sorted(json.loads(l)["body"] for l in lines) == ["body-1", "body-5", "body-9"]
    one = json.loads(shmq("message", "view", sent[3].offset_msg_id, *ns))
    assert one["body"] == "body-3" and one["msgId"] == sent[3].msg_id
    by_uniq = json.loads(shmq("message", "view", sent[4].msg_id, "--topic", "Adm", *ns))
    assert by_uniq["body"] == "body-4"
    shmq("topic", "delete", "Adm", *ns)
    assert "Adm" not in shmq("topic", "list", *ns).split()
