"""The Apache RocketMQ 4.9.8 Java client (rocketmq-client + rocketmq-acl, AclClientRPCHook) sends
and consumes through a shmq broker with aclEnable=true, and is refused where RocketMQ refuses."""
from __future__ import annotations

import json
import subprocess

import pytest

from tests.thirdparty import jvm

from .broker_helpers import start_broker  # noqa: F401  (fixture)
from .conftest import namesrv, processes, start_namesrv  # noqa: F401
from .test_security_acl import EXC, USER, acl_broker  # noqa: F401  (fixture)

SOURCE = jvm.HERE / "java" / "acl" / "AclClient.java"


@pytest.fixture(scope="module")
def acl_client_cp():
    return jvm.harness_classpath(SOURCE, jvm.ROCKETMQ_CLIENT, jvm.ROCKETMQ_ACL)


def test_java_client_with_acl_rpc_hook(acl_broker, namesrv, acl_client_cp, tmp_path):
    cmd = jvm.java_command("AclClient", acl_client_cp, namesrv.addr, USER.access_key, USER.secret_key,
                           "AclT", "Other", "5", props={"user.home": str(tmp_path)})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    events = [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    assert [e["status"] for e in events if e["event"] == "sent"] == ["SEND_OK"] * 5
    refused = [e for e in events if e["event"] == "refused"]
    assert refused and refused[0]["code"] == 1, events
    assert (EXC + "No default permission for topic:Other") in refused[0]["message"]
    done = [e for e in events if e["event"] == "done"][0]
    assert done["complete"], events
    assert {e["body"] for e in events if e["event"] == "message"} >= {f"java-{i}" for i in range(5)}
