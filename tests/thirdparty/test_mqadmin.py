"""mqadmin (rocketmq-tools 4.9.8) against shmq: one JVM runs the commands one after another
(``java/Admin.java``), against a NameServer and a 2-worker broker that a shmq Python producer
and a Java push consumer (``Harness member``) are using, and the test reads what each command
printed: the topic created, the messages sent (ids, keys, bodies), the consumer's connection,
the lag produced by stopping it, the offsets a reset moved, the broker's config and stats.
"""
from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from shmq import Message, Producer
from tests.integration.broker_helpers import start_broker  # noqa: F401
from tests.integration.conftest import namesrv, processes, start_namesrv  # noqa: F401

from . import jvm
from .harnesses import MqAdmin, admin_cp, java_member_argv

TOPIC, GROUP, PGROUP = "AdmT", "admg", "admp"


@pytest.fixture
def admin(tmp_path):
    jvm.require_java()
    try:
        admin_cp()
    except jvm.Unavailable as e:
        pytest.skip(f"rocketmq-tools 4.9.8 unavailable: {e}")
    a = MqAdmin(tmp_path / "mqadmin")
    yield a
    a.close()


class Member:
    """A Java push consumer of GROUP (Harness member): what it was allocated and received."""

    def __init__(self, argv):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.received: list[str] = []
        self.client_id = None

    def wait_received(self, n: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.received) < n and time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            ev = json.loads(line)
            if "recv" in ev:
                self.received.append(ev["recv"])
            self.client_id = ev.get("clientId", self.client_id)
        assert len(self.received) >= n, f"the Java consumer got {self.received}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdout.close()


def _diff_total(out: str) -> int | None:
    m = re.search(r"Diff Total:\s*(\d+)", out)
    return int(m.group(1)) if m else None


def test_mqadmin_commands_against_shmq(namesrv, start_broker, admin, tmp_path):
    br = start_broker(namesrv=namesrv, workers=2)
    ns, bname = namesrv.addr, None
    run = lambda *a, **kw: admin.run(a[0], "-n", ns, *a[1:], **kw)  # noqa: E731

    # ---- topics and routes
    out = run("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4")
    assert f"create topic to {br.addr} success." in out, out
    assert TOPIC in run("topicList").split()
    route = json.loads(re.sub(r"([{,])\s*(\d+):", r'\1"\2":', run("topicRoute", "-t", TOPIC)))
    assert route["queueDatas"][0]["writeQueueNums"] == 4
    bname = route["brokerDatas"][0]["brokerName"]
    assert route["brokerDatas"][0]["brokerAddrs"]["0"] == br.addr

    # ---- a shmq producer sends 8 keyed messages; a Java push consumer takes them
    producer = Producer(PGROUP, ns, local="never")
    producer.start()
    sent = [producer.send(Message(TOPIC, b"body-%d" % i, keys=f"key-{i}", tags="TagA")) for i in range(8)]
    member = Member(java_member_argv(ns, TOPIC, GROUP, "adm-member", tmp_path / "java-logs"))
    try:
        member.wait_received(8)
        assert sorted(member.received) == sorted(f"body-{i}" for i in range(8))
        rows = [ln.split() for ln in run("topicStatus", "-t", TOPIC).splitlines()[1:] if ln.strip()]
        assert sum(int(r[3]) for r in rows) == 8 and {r[0] for r in rows} == {bname}

        out = run("consumerConnection", "-g", GROUP)
        assert member.client_id and member.client_id in out and "CLUSTERING" in out and TOPIC in out, out
        out = run("producerConnection", "-g", PGROUP, "-t", TOPIC)
        assert "PYTHON" in out or "JAVA" in out, out
        # the consumer commits its offsets every 5 s (persistConsumerOffsetInterval); before
        # that the group has none and mqadmin says so (as against RocketMQ)
        deadline = time.monotonic() + 20
        while _diff_total(out := run("consumerProgress", "-g", GROUP)) != 0 and time.monotonic() < deadline:
            time.sleep(1)
        assert _diff_total(out) == 0, out
        # -s true: the Client IP column comes from each member's GET_CONSUMER_RUNNING_INFO (307)
        out = run("consumerProgress", "-g", GROUP, "-s", "true")
        ip = member.client_id.split("@")[0]
        assert len([ln for ln in out.splitlines() if ln.startswith(TOPIC) and ip in ln]) == 4, out

        # CONSUME_MESSAGE_DIRECTLY through the broker to the Java consumer
        out = run("queryMsgById", "-i", sent[2].offset_msg_id, "-g", GROUP, "-d", member.client_id)
        assert "ConsumeMessageDirectlyResult" in out and "CR_SUCCESS" in out, out
    finally:
        member.stop()

    # ---- lag: 5 more while nobody consumes
    mark = int(time.time() * 1000) - 1
    for i in range(8, 13):
        producer.send(Message(TOPIC, b"body-%d" % i, keys=f"key-{i}"))
    assert _diff_total(run("consumerProgress", "-g", GROUP)) == 5
    # reset to before the first message: the consumer is offline, so mqadmin commits the offsets itself
    out = run("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", str(mark - 60_000))
    assert _diff_total(run("consumerProgress", "-g", GROUP)) == 13, out
    out = run("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "now")
    assert _diff_total(run("consumerProgress", "-g", GROUP)) == 0, out

    # ---- messages by key, id, unique key, offset
    out = run("queryMsgByKey", "-t", TOPIC, "-k", "key-3")
    assert sent[3].msg_id in out or sent[3].offset_msg_id in out, out
    out = run("queryMsgById", "-i", sent[3].offset_msg_id)
    assert re.search(rf"Topic:\s+{TOPIC}", out) and re.search(r"Keys:\s+\[?key-3\b", out), out
    out = run("queryMsgByUniqueKey", "-i", sent[4].msg_id, "-t", TOPIC)
    assert re.search(r"Keys:\s+\[?key-4\b", out), out
    q, off = sent[5].queue_id, sent[5].queue_offset
    out = run("queryMsgByOffset", "-t", TOPIC, "-b", bname, "-i", str(q), "-o", str(off))
    assert re.search(r"Keys:\s+\[?key-5\b", out), out
    out = run("printMsg", "-t", TOPIC, "-d", "true")
    assert out.count("MSGID:") == 13 and "body-12" in out, out
    out = run("sendMessage", "-t", TOPIC, "-p", "hello-admin", "-k", "key-admin", "-c", "TagX")
    assert "SEND_OK" in out, out
    out = run("consumeMessage", "-t", TOPIC, "-g", "admin-pull")
    assert out.count("MSGID:") == 14, out

    # ---- broker views
    out = run("getBrokerConfig", "-b", br.addr)
    assert re.search(rf"brokerName\s+=\s+{bname}", out), out
    out = run("brokerStatus", "-b", br.addr)
    assert int(re.search(r"msgPutTotalTodayNow\s*:\s*(\d+)", out).group(1)) >= 14, out
    out = run("clusterList")
    assert "Exception" not in out and re.search(rf"DefaultCluster\s+{bname}\s+0\s+{re.escape(br.addr)}\s+V4_9_8", out), out
    out = run("statsAll", "-t", TOPIC)
    row = [ln.split() for ln in out.splitlines() if ln.startswith(TOPIC)]
    assert row and row[0][1] == GROUP and int(row[0][-2]) == 14, out  # #InMsg24Hour

    # ---- subscription groups
    out = run("updateSubGroup", "-c", "DefaultCluster", "-g", "subg", "-r", "3")
    assert f"create subscription group to {br.addr} success." in out, out
    out = run("getConsumerConfig", "-g", "subg")
    assert re.search(r"retryMaxTimes\s*=?\s*3", out), out
    out = run("deleteSubGroup", "-c", "DefaultCluster", "-g", "subg")
    assert "delete subscription group [subg]" in out and "success" in out, out
    assert "retryMaxTimes" not in run("getConsumerConfig", "-g", "subg")

    # ---- housekeeping and deletion
    assert run("cleanExpiredCQ", "-c", "DefaultCluster").strip() == "success"
    run("updateTopic", "-c", "DefaultCluster", "-t", "AdmGone", "-r", "1", "-w", "1")
    out = run("deleteTopic", "-c", "DefaultCluster", "-t", "AdmGone")
    assert "delete topic [AdmGone] from cluster [DefaultCluster] success." in out, out
    assert "AdmGone" not in run("topicList").split()
    out = run("deleteTopic", "-c", "DefaultCluster", "-t", "TBW102")
    assert "conflict with system topic" in out, out
    assert "TBW102" in run("topicList").split()
    out = run("updateTopic", "-c", "DefaultCluster", "-t", "SCHEDULE_TOPIC_XXXX", "-r", "2", "-w", "2")
    assert "conflict with system topic" in out, out

    # ---- round trips
    out = run("checkMsgSendRT", "-t", TOPIC, "-a", "5", "-s", "64")
    assert len(re.findall(rf"{bname}\s+\d\s+true", out)) == 5 and "Avg RT" in out, out
    out = admin.run("--stop-after=6000", "clusterRT", "-n", ns, "-a", "3", "-s", "64", "-i", "1")
    assert re.search(rf"DefaultCluster\s+{bname}\s+[\d.]+\s+3\s+0", out), out
    producer.shutdown()
