"""The Apache RocketMQ 4.9.8 Java producer meets a full disk on a shmq broker as it would meet
one on Apache RocketMQ's: MQBrokerException with SERVICE_NOT_AVAILABLE (14) and the "disk is
full" remark, no SEND_OK for a message not stored; once space returns it sends again."""
from __future__ import annotations

import json
import subprocess

import pytest

from shmq.protocol import SyncRemotingClient

from tests.thirdparty import jvm

from ..integration.broker_helpers import start_broker  # noqa: F401
from ..integration.client_helpers import make_topic, wait_route
from ..integration.conftest import namesrv, processes, start_namesrv  # noqa: F401
from .helpers import drain

SOURCE = jvm.HERE / "java" / "diskfull" / "DiskFullProducer.java"
FILE = 256 * 1024
BODY = 8 * 1024


@pytest.fixture(scope="module")
def producer_cp():
    return jvm.harness_classpath(SOURCE, jvm.ROCKETMQ_CLIENT)


def _run(cp, namesrv, tmp_path, count: int, tag: str) -> list[dict]:
    cmd = jvm.java_command("DiskFullProducer", cp, namesrv.addr, "JDF", str(count), str(BODY), tag,
                           props={"user.home": str(tmp_path)})
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    return [json.loads(x) for x in out.stdout.splitlines() if x.startswith("{")]


def test_java_producer_gets_service_not_available_then_sends_again(namesrv, start_broker, fault_file,
                                                                   producer_cp, tmp_path):
    br = start_broker(namesrv, workers=1, settings={"mappedFileSizeCommitLog": FILE})
    make_topic(br, "JDF", queues=1)
    wait_route(namesrv.addr, "JDF")
    assert [e["status"] for e in _run(producer_cp, namesrv, tmp_path, 2, "before")] == ["SEND_OK"] * 2
    fault_file.set("enospc:preallocate:/commitlog/")
    during = _run(producer_cp, namesrv, tmp_path, 4 * FILE // BODY, "during")
    refused = [e for e in during if e["event"] == "refused"]
    assert refused, during
    assert all(e["code"] == 14 and "disk is full" in e["message"] for e in refused), refused[:3]
    sent = [e for e in during if e["event"] == "sent"]
    assert all(e["status"] == "SEND_OK" for e in sent)
    fault_file.clear()
    assert [e["status"] for e in _run(producer_cp, namesrv, tmp_path, 2, "after")] == ["SEND_OK"] * 2
    with SyncRemotingClient(br.addr, timeout=10) as c:
        stored = drain(c, "JDF")
    # exactly what was answered SEND_OK is stored, in order: nothing refused slipped in
    tags = [b.split(b"-", 2)[0] + b"-" + b.split(b"-", 2)[1] for b in stored]
    assert tags == [b"before-0", b"before-1"] + [b"during-%d" % i for i in range(len(sent))] + [b"after-0", b"after-1"]
