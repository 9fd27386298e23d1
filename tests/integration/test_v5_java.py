"""RocketMQ 5.3.1's Java client (remoting, from Maven Central) against shmq: timer messages at
several delays (Message.setDeliverTimeMs) read back by a DefaultLitePullConsumer (which
sends LITE_PULL_MESSAGE), none before its time; push consumers with setClientRebalance(false)
after SET_MESSAGE_REQUEST_MODE=POP (QUERY_ASSIGNMENT, POP_MESSAGE, ACK_MESSAGE), more
consumers than queues, every message consumed."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.thirdparty import jvm

from .broker_helpers import create_topic, start_broker  # noqa: F401
from .client_helpers import wait_route
from .conftest import namesrv, processes  # noqa: F401
from shmq.protocol import SyncRemotingClient

SOURCE = jvm.HERE / "java" / "v5" / "V5Client.java"


@pytest.fixture(scope="module")
def v5_cp():
    return jvm.harness_classpath(SOURCE, jvm.ROCKETMQ_CLIENT_5)


def _run(cp, tmp_path, *args, timeout=180):
    cmd = jvm.java_command("V5Client", cp, *args, heap="256m", props={"user.home": str(tmp_path)})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    events = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return events


def test_v5_timers_and_lite_pull(start_broker, namesrv, v5_cp, tmp_path):
    br = start_broker(namesrv)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "V5T", queues=2)
    wait_route(namesrv.addr, "V5T")
    delays = [800, 1500, 2500, 4000]
    events = _run(v5_cp, tmp_path, "timers", namesrv.addr, "V5T", ",".join(map(str, delays)))
    sent = {f"timer-{e['i']}": e for e in events if e["event"] == "sent"}
    assert [e["status"] for e in sent.values()] == ["SEND_OK"] * len(delays)
    got = [e for e in events if e["event"] == "message"]
    assert sorted(e["body"] for e in got) == sorted(sent)
    for e in got:
        assert e["store"] >= sent[e["body"]]["due"], e               # never early
        if e["out"] != "null":  # a timer whose time passed while it was sent is stored plain, at once
            assert int(e["out"]) == sent[e["body"]]["due"]
    assert sum(e["out"] != "null" for e in got) >= 3, got           # the far ones went through the wheel


def test_v5_push_consumers_in_pop_mode(start_broker, namesrv, v5_cp, tmp_path):
    # POP from the first rebalance on: set by the harness's SET_MESSAGE_REQUEST_MODE too, but a
    # consumer that queried its assignment before that would pull the queues meanwhile
    br = start_broker(namesrv, settings={"defaultMessageRequestMode": "POP"})
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "V5P", queues=2)
    wait_route(namesrv.addr, "V5P")
    events = _run(v5_cp, tmp_path, "pop", namesrv.addr, br.addr, "V5P", "v5-pop-cg", "4", "200", timeout=240)
    done = [e for e in events if e["event"] == "done"][0]
    assert done["unique"] == 200, done
    assert done["duplicates"] == 0, done
    # four POP consumers on two queues: all 200 once between them (how many of the four got a
    # share depends on timing: one that pops 32 at a time can drain 200 before the others poll)
    assert 1 <= done["consumers"] <= 4, done
