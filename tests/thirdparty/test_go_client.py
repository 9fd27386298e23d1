"""Apache RocketMQ's Go client (rocketmq-client-go v2, ``go/main.go``) against shmq: a
producer's synchronous sends and a push consumer's round trip through a 2-worker broker.
Every message sent is received once, with the id, tag and key it was sent with."""
from __future__ import annotations

import json
import subprocess
from collections import Counter

import pytest

from shmq.protocol import SyncRemotingClient
from tests.integration.broker_helpers import create_topic, start_broker  # noqa: F401
from tests.integration.conftest import namesrv, processes, start_namesrv  # noqa: F401

from . import jvm
from .harnesses import go_binary


def test_go_client_send_and_consume(namesrv, start_broker):
    try:
        binary = go_binary()
    except jvm.Unavailable as e:
        pytest.skip(f"the Go client test needs go and rocketmq-client-go v2: {e}")
    br = start_broker(namesrv=namesrv, workers=2)
    with SyncRemotingClient(br.addr, timeout=5) as c:
        assert create_topic(c, "GoT", queues=4).code == 0
    proc = subprocess.run([str(binary), namesrv.addr, "GoT", "gog", "20"], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    sent, got = out["sent"], out["received"]
    assert [s.get("error") for s in sent] == [None] * 20 and {s["status"] for s in sent} == {0}  # SendOK
    assert {s["queue"] for s in sent} == {0, 1, 2, 3}  # spread over the queues
    counts = Counter(m["body"] for m in got)
    assert sorted(counts) == sorted(f"go-{i}" for i in range(20)) and set(counts.values()) == {1}, counts
    by_body = {m["body"]: m for m in got}
    for s in sent:
        m = by_body[s["body"]]
        assert m["msgId"] == s["msgId"] and m["tags"] == "go" and m["keys"] == "gk-" + s["body"][3:]
