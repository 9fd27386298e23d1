"""Clean shutdown (SIGTERM): a held pull is answered, not cut; offsets persisted; abort
removed; the unix control socket gone. broker.conf with RocketMQ keys and an unknown key."""
from __future__ import annotations

import os
import subprocess
import sys
import time

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import PullMessageRequestHeader

from .broker_helpers import BROKER_READY, create_topic, start_broker  # noqa: F401
from .conftest import processes, start_process  # noqa: F401


def test_sigterm_answers_held_pulls_persists_offsets_and_removes_abort(start_broker):
    br = start_broker(settings={"flushConsumerOffsetInterval": 600_000})  # only the shutdown writes it
    store = br.store
    assert os.path.exists(os.path.join(store, "abort"))
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "ST", queues=1)
        assert c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="sg", topic="ST", queueId=0,
                                commitOffset=0)).code == 0
        h = PullMessageRequestHeader(consumerGroup="sg", topic="ST", queueId=0, queueOffset=0, maxMsgNums=32,
                                     sysFlag=2 | 4, commitOffset=0, suspendTimeoutMillis=30_000, subVersion=0,
                                     subscription="*")
        cmd = request(RequestCode.PULL_MESSAGE, h)
        cmd.opaque = 5
        c.send(cmd)
        time.sleep(0.3)
        t0 = time.monotonic()
        br.popen.terminate()
        resp = c.receive(10)  # answered at shutdown, long before its 30 s
        assert resp.opaque == 5 and resp.code == 19 and time.monotonic() - t0 < 8
    assert br.popen.wait(20) == 0
    assert not os.path.exists(os.path.join(store, "abort"))
    assert not os.path.exists(os.path.join(store, "broker.sock"))
    with open(os.path.join(store, "config", "consumerOffset.json")) as f:
        assert '"ST@sg":{0:0}' in f.read()


def test_broker_conf_file(tmp_path, processes):
    conf = tmp_path / "broker.conf"
    conf.write_text(
        "# a RocketMQ broker.conf\n"
        "brokerClusterName = MyCluster\n"
        "brokerName=broker-x\n"
        "brokerId=0\n"
        "deleteWhen=04\n"
        "fileReservedTime=48\n"
        "brokerRole=ASYNC_MASTER\n"
        "flushDiskType=SYNC_FLUSH\n"
        f"storePathRootDir={tmp_path / 'store'}\n"
        "mappedFileSizeCommitLog=1048576\n"
        "listenPort=0\n"
        "workers=2\n"
        "autoCreateTopicEnable=false\n"
        "someFutureKey=1\n")
    p = start_process([sys.executable, "-m", "shmq.cli.broker", "-c", str(conf)], BROKER_READY,
                      tmp_path / "broker.log")
    processes.append(p)
    assert "unknown key 'someFutureKey' ignored" in p.log()
    with SyncRemotingClient(f"127.0.0.1:{p.match.group(1)}") as c:
        # no TBW102 without autoCreateTopicEnable: an unknown topic is 17
        from .broker_helpers import send
        assert send(c, "Fresh", b"x").code == 17
        create_topic(c, "Fresh", queues=1)
        r = send(c, "Fresh", b"x")  # SYNC_FLUSH: answered once flushed
        assert r.code == 0
        from shmq.message.record import iter_records

        from .broker_helpers import pull
        (m,) = list(iter_records(pull(c, "Fresh", 0, 0).body))
        assert m.properties["CLUSTER"] == "MyCluster"


def test_bad_config_refuses_to_start(tmp_path):
    r = subprocess.run([sys.executable, "-m", "shmq.cli.broker", "--store", str(tmp_path / "s"),
                        "--set", "flushDiskType=SOMETIMES"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "flushDiskType" in r.stderr
