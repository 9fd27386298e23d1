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


class Env:
    """What the phases share: the broker, mqadmin, the shmq producer and what it sent."""

    def __init__(self, namesrv, broker, admin, tmp_path):
        self.ns, self.br, self.admin, self.tmp = namesrv.addr, broker, admin, tmp_path
        self.bname = ""
        self.producer = Producer(PGROUP, self.ns, local="never")
        self.sent: list = []

    def run(self, cmd: str, *args: str) -> str:
        return self.admin.run(cmd, "-n", self.ns, *args)


def _topics(e: Env) -> None:
    out = e.run("updateTopic", "-c", "DefaultCluster", "-t", TOPIC, "-r", "4", "-w", "4")
    assert f"create topic to {e.br.addr} success." in out, out
    assert TOPIC in e.run("topicList").split()
    route = json.loads(re.sub(r"([{,])\s*(\d+):", r'\1"\2":', e.run("topicRoute", "-t", TOPIC)))
    assert route["queueDatas"][0]["writeQueueNums"] == 4
    e.bname = route["brokerDatas"][0]["brokerName"]
    assert route["brokerDatas"][0]["brokerAddrs"]["0"] == e.br.addr


def _with_consumer_online(e: Env) -> None:
    """8 keyed messages from a shmq producer, taken by a Java push consumer; the views of a
    live group; a reset while it is online makes it consume them again."""
    e.producer.start()
    e.sent = [e.producer.send(Message(TOPIC, b"body-%d" % i, keys=f"key-{i}", tags="TagA")) for i in range(8)]
    member = Member(java_member_argv(e.ns, TOPIC, GROUP, "adm-member", e.tmp / "java-logs"))
    try:
        member.wait_received(8)
        assert sorted(member.received) == sorted(f"body-{i}" for i in range(8))
        rows = [ln.split() for ln in e.run("topicStatus", "-t", TOPIC).splitlines()[1:] if ln.strip()]
        assert sum(int(r[3]) for r in rows) == 8 and {r[0] for r in rows} == {e.bname}
        out = e.run("consumerConnection", "-g", GROUP)
        assert member.client_id and member.client_id in out and "CLUSTERING" in out and TOPIC in out, out
        out = e.run("producerConnection", "-g", PGROUP, "-t", TOPIC)
        assert e.producer.instance.client_id in out, out
        # the consumer commits its offsets every 5 s (persistConsumerOffsetInterval); before
        # that the group has none and mqadmin says so (as against RocketMQ)
        deadline = time.monotonic() + 20
        while _diff_total(out := e.run("consumerProgress", "-g", GROUP)) != 0 and time.monotonic() < deadline:
            time.sleep(1)
        assert _diff_total(out) == 0, out
        # -s true: the Client IP column comes from each member's GET_CONSUMER_RUNNING_INFO (307)
        out = e.run("consumerProgress", "-g", GROUP, "-s", "true")
        ip = member.client_id.split("@")[0]
        assert len([ln for ln in out.splitlines() if ln.startswith(TOPIC) and ip in ln]) == 4, out
        # CONSUME_MESSAGE_DIRECTLY through the broker to the Java consumer
        out = e.run("queryMsgById", "-i", e.sent[2].offset_msg_id, "-g", GROUP, "-d", member.client_id)
        assert "ConsumeMessageDirectlyResult" in out and "CR_SUCCESS" in out, out
        member.wait_received(9)  # the consumer's own listener was handed that message
        assert member.received[8] == "body-2"
        # online reset: the broker tells the consumer, which goes back and consumes all 8 again
        out = e.run("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", str(int(time.time() * 1000) - 600_000))
        assert "rollback consumer offset" in out, out
        member.wait_received(17)
        assert sorted(member.received[9:]) == sorted(f"body-{i}" for i in range(8))
    finally:
        member.stop()


def _lag_and_offline_reset(e: Env) -> None:
    for i in range(8, 13):
        e.producer.send(Message(TOPIC, b"body-%d" % i, keys=f"key-{i}"))
    deadline = time.monotonic() + 10  # the stopped consumer's last commit has landed
    while _diff_total(e.run("consumerProgress", "-g", GROUP)) != 5 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert _diff_total(e.run("consumerProgress", "-g", GROUP)) == 5
    # nobody online: the broker answers 206 and mqadmin commits the offsets itself
    e.run("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", str(int(time.time() * 1000) - 600_000))
    assert _diff_total(e.run("consumerProgress", "-g", GROUP)) == 13
    e.run("resetOffsetByTime", "-g", GROUP, "-t", TOPIC, "-s", "now")
    assert _diff_total(e.run("consumerProgress", "-g", GROUP)) == 0


def _messages(e: Env) -> None:
    out = e.run("queryMsgByKey", "-t", TOPIC, "-k", "key-3")
    assert e.sent[3].msg_id in out or e.sent[3].offset_msg_id in out, out
    out = e.run("queryMsgById", "-i", e.sent[3].offset_msg_id)
    assert re.search(rf"Topic:\s+{TOPIC}", out) and re.search(r"Keys:\s+\[?key-3\b", out), out
    out = e.run("queryMsgByUniqueKey", "-i", e.sent[4].msg_id, "-t", TOPIC)
    assert re.search(r"Keys:\s+\[?key-4\b", out), out
    q, off = e.sent[5].queue_id, e.sent[5].queue_offset
    out = e.run("queryMsgByOffset", "-t", TOPIC, "-b", e.bname, "-i", str(q), "-o", str(off))
    assert re.search(r"Keys:\s+\[?key-5\b", out), out
    out = e.run("printMsg", "-t", TOPIC, "-d", "true")
    assert out.count("MSGID:") == 13 and "body-12" in out, out
    out = e.run("sendMessage", "-t", TOPIC, "-p", "hello-admin", "-k", "key-admin", "-c", "TagX")
    assert "SEND_OK" in out, out
    out = e.run("consumeMessage", "-t", TOPIC, "-g", "admin-pull")
    assert out.count("MSGID:") == 14, out


def _broker_views(e: Env) -> None:
    out = e.run("getBrokerConfig", "-b", e.br.addr)
    assert re.search(rf"brokerName\s+=\s+{e.bname}", out), out
    out = e.run("brokerStatus", "-b", e.br.addr)
    assert int(re.search(r"msgPutTotalTodayNow\s*:\s*(\d+)", out).group(1)) >= 14, out
    out = e.run("clusterList")
    assert "Exception" not in out, out
    assert re.search(rf"DefaultCluster\s+{e.bname}\s+0\s+{re.escape(e.br.addr)}\s+V4_9_8", out), out
    out = e.run("statsAll", "-t", TOPIC)
    row = [ln.split() for ln in out.splitlines() if ln.startswith(TOPIC)]
    assert row and row[0][1] == GROUP and int(row[0][-2]) == 14, out  # #InMsg24Hour


def _subscription_groups(e: Env) -> None:
    out = e.run("updateSubGroup", "-c", "DefaultCluster", "-g", "subg", "-r", "3")
    assert f"create subscription group to {e.br.addr} success." in out, out
    out = e.run("getConsumerConfig", "-g", "subg")
    assert re.search(r"retryMaxTimes\s*=?\s*3", out), out
    out = e.run("deleteSubGroup", "-c", "DefaultCluster", "-g", "subg")
    assert "delete subscription group [subg]" in out and "success" in out, out
    assert "retryMaxTimes" not in e.run("getConsumerConfig", "-g", "subg")


def _housekeeping_and_deletion(e: Env) -> None:
    assert e.run("cleanExpiredCQ", "-c", "DefaultCluster").strip() == "success"
    e.run("updateTopic", "-c", "DefaultCluster", "-t", "AdmGone", "-r", "1", "-w", "1")
    out = e.run("deleteTopic", "-c", "DefaultCluster", "-t", "AdmGone")
    assert "delete topic [AdmGone] from cluster [DefaultCluster] success." in out, out
    assert "AdmGone" not in e.run("topicList").split()
    out = e.run("deleteTopic", "-c", "DefaultCluster", "-t", "TBW102")
    assert "conflict with system topic" in out, out
    assert "TBW102" in e.run("topicList").split()
    out = e.run("updateTopic", "-c", "DefaultCluster", "-t", "SCHEDULE_TOPIC_XXXX", "-r", "2", "-w", "2")
    assert "conflict with system topic" in out, out


def _round_trips(e: Env) -> None:
    out = e.run("checkMsgSendRT", "-t", TOPIC, "-a", "5", "-s", "64")
    assert len(re.findall(rf"{e.bname}\s+\d\s+true", out)) == 5 and "Avg RT" in out, out
    out = e.admin.run("--stop-after=6000", "clusterRT", "-n", e.ns, "-a", "3", "-s", "64", "-i", "1")
    assert re.search(rf"DefaultCluster\s+{e.bname}\s+[\d.]+\s+3\s+0", out), out


def test_mqadmin_commands_against_shmq(namesrv, start_broker, admin, tmp_path):
    e = Env(namesrv, start_broker(namesrv=namesrv, workers=2), admin, tmp_path)
    try:
        for phase in (_topics, _with_consumer_online, _lag_and_offline_reset, _messages, _broker_views,
                      _subscription_groups, _housekeeping_and_deletion, _round_trips):
            phase(e)
    finally:
        e.producer.shutdown()
