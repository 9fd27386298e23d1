"""The Apache RocketMQ 4.9.8 Java client against shmq's replication modes (real processes):
a SYNC_MASTER pair answers the Java producer SEND_OK, and with the master killed -9 a Java
consumer reads every message from the slave; an ASYNC_MASTER pair likewise."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.thirdparty import jvm

from .broker_helpers import start_broker  # noqa: F401  (fixture)
from .ha_helpers import commit_pos, kill_broker, start_pair, wait_until  # noqa: F401  (fixture)

SOURCE = jvm.HERE / "java" / "ha" / "HaClient.java"


@pytest.fixture(scope="module")
def ha_client_cp():
    return jvm.harness_classpath(SOURCE, jvm.ROCKETMQ_CLIENT)


def _java(cp, tmp_path, *args, timeout=180):
    cmd = jvm.java_command("HaClient", cp, *map(str, args), props={"user.home": str(tmp_path)})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    return [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]


@pytest.mark.parametrize("role", ["SYNC_MASTER", "ASYNC_MASTER"])
def test_java_client_on_a_pair_and_on_the_slave_alone(start_pair, namesrv, ha_client_cp, tmp_path, role):
    master, slave = start_pair(role, name=f"jpair-{role}")
    if role == "SYNC_MASTER":  # SEND_OK needs the slave connected
        from shmq.protocol import SyncRemotingClient
        from .broker_helpers import send
        with SyncRemotingClient(master.addr, timeout=10) as c:
            wait_until(lambda: send(c, "JHA", b"probe").code == 0, what="the slave to connect")
    sent = _java(ha_client_cp, tmp_path, "produce", namesrv.addr, "JHA", 30, "j-")
    assert [e["status"] for e in sent] == ["SEND_OK"] * 30
    wait_until(lambda: commit_pos(slave.addr) == commit_pos(master.addr), what="the slave to catch up")
    wait_until(lambda: _has_topic(slave.addr, "JHA"), what="the topic on the slave")
    kill_broker(master)
    events = _java(ha_client_cp, tmp_path, "consume", namesrv.addr, f"jcg-{role}", "JHA", 30, 90)
    done = [e for e in events if e["event"] == "done"][0]
    assert done["complete"], done
    assert {e["body"] for e in events if e["event"] == "message"} >= {f"j-{i}" for i in range(30)}


def _has_topic(addr, topic):
    from shmq.protocol import RequestCode, SyncRemotingClient, request
    with SyncRemotingClient(addr, timeout=5) as c:
        return f'"{topic}"'.encode() in c.invoke(request(RequestCode.GET_ALL_TOPIC_CONFIG)).body
