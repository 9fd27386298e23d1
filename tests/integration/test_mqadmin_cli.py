"""The mqadmin-named ``shmq`` commands against a live NameServer and broker: tables, ``--json``,
and errors that name the problem and give a hint (unknown topic, broker down)."""
from __future__ import annotations

import json
import subprocess
import sys
import time

from shmq.protocol import RequestCode, SyncRemotingClient, request

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401


def run(*args, ok: bool = True) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "shmq.cli.main", *args], capture_output=True, text=True, timeout=60)
    if ok:
        assert r.returncode == 0, r.stderr
    return r


def js(*args):
    return json.loads(run(*args, "--json").stdout)


def test_daily_commands(namesrv, start_broker):
    b = start_broker(namesrv)
    ns = ["-n", namesrv.addr]
    assert "success" in run("updateTopic", "-t", "Cli", "-w", "2", "-c", "DefaultCluster", *ns).stdout
    wait_route(namesrv.addr, "Cli")
    assert "Cli" in [r["topic"] for r in js("topicList", *ns)]
    assert js("topicRoute", "-t", "Cli", *ns)["queueDatas"][0]["writeQueueNums"] == 2
    sent = [js("sendMessage", "-t", "Cli", "-p", f"hello-{i}", "-k", f"k{i}", "-c", "TagA", *ns)[0] for i in range(4)]
    assert all(s["sendStatus"] == "SEND_OK" for s in sent)
    status = js("topicStatus", "-t", "Cli", *ns)
    assert sum(r["max_offset"] for r in status) == 4 and len(status) == 2
    table = run("topicStatus", "-t", "Cli", *ns).stdout
    assert table.splitlines()[0].split()[:2] == ["broker", "queue"]

    clusters = js("clusterList", *ns)
    assert clusters[0]["addr"] == b.addr and clusters[0]["cluster"] == "DefaultCluster"
    assert "brokerVersionDesc" in js("brokerStatus", "-b", b.addr, *ns)[b.addr]

    # message commands
    s0 = sent[0]
    one = js("queryMsgById", "-i", s0["offsetMsgId"], *ns)
    assert one["body"] == "hello-0" and one["keys"] == ["k0"]
    assert js("queryMsgByUniqueKey", "-i", s0["msgId"], "-t", "Cli", *ns)["body"] == "hello-0"
    at = js("queryMsgByOffset", "-t", "Cli", "-b", s0["brokerName"], "-i", str(s0["queueId"]),
            "-o", str(s0["queueOffset"]), *ns)
    assert at["body"] == "hello-0"
    time.sleep(1.2)  # the index follows the append within a flush interval
    assert [m["body"] for m in js("queryMsgByKey", "-t", "Cli", "-k", "k2", *ns)] == ["hello-2"]
    got = js("consumeMessage", "-t", "Cli", "-c", "10", *ns)
    assert sorted(m["body"] for m in got) == [f"hello-{i}" for i in range(4)]
    printed = run("printMsg", "-t", "Cli", "--begin=-1h", *ns).stdout
    assert printed.count("MSGID:") == 4 and "BODY: hello-3" in printed

    # a group commits on one queue; progress shows the lag per queue, reset moves it
    c = SyncRemotingClient(b.addr)
    try:
        q = s0["queueId"]
        assert c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="cli-g", topic="Cli",
                                queueId=q, commitOffset=s0["queueOffset"] + 1)).code == 0
    finally:
        c.close()
    prog = js("consumerProgress", "-g", "cli-g", "-t", "Cli", *ns)
    assert sum(r["diff"] for r in prog) == 3
    assert "Diff Total: 3" in run("consumerProgress", "-g", "cli-g", "-t", "Cli", *ns).stdout
    reset = js("resetOffsetByTime", "-g", "cli-g", "-t", "Cli", "-s", "now", *ns)
    assert sum(r["offset"] for r in reset) == 4
    assert sum(r["diff"] for r in js("consumerProgress", "-g", "cli-g", "-t", "Cli", *ns)) == 0

    assert "success" in run("deleteTopic", "-t", "Cli", "-c", "DefaultCluster", *ns).stdout
    assert "Cli" not in [r["topic"] for r in js("topicList", *ns)]


def test_errors_have_hints(namesrv, start_broker):
    start_broker(namesrv)
    ns = ["-n", namesrv.addr]
    r = run("topicStatus", "-t", "NoSuchTopic", *ns, ok=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error:" in r.stderr and "hint: the topic does not exist" in r.stderr
    r = run("topicList", "-n", "127.0.0.1:1", ok=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "hint: nothing answers there" in r.stderr
    r = run("queryMsgByOffset", "-t", "TBW102", "-b", "nobroker", "-i", "0", "-o", "0", *ns, ok=False)
    assert r.returncode == 1 and "does not serve topic" in r.stderr


ACL = """\
accounts:
  - accessKey: CliAdmin
    secretKey: cli-secret-1
    admin: true
  - accessKey: CliUser
    secretKey: cli-secret-2
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: DENY
"""


def test_acl_refused_has_a_hint_and_credentials_work(namesrv, start_broker, tmp_path):
    path = tmp_path / "plain_acl.yml"
    path.write_text(ACL)
    start_broker(namesrv, settings={"aclEnable": "true", "aclFile": str(path)})
    ns = ["-n", namesrv.addr]
    r = run("updateTopic", "-t", "AclCli", "-c", "DefaultCluster", *ns, ok=False)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "hint: the broker refused the request: with ACL on, give --access-key and --secret-key" in r.stderr
    r = run("updateTopic", "-t", "AclCli", "-c", "DefaultCluster", "--access-key", "CliUser",
            "--secret-key", "cli-secret-2", *ns, ok=False)
    assert r.returncode == 1 and "hint: the broker refused" in r.stderr
    admin = ["--access-key", "CliAdmin", "--secret-key", "cli-secret-1"]
    assert "success" in run("updateTopic", "-t", "AclCli", "-c", "DefaultCluster", *admin, *ns).stdout
    wait_route(namesrv.addr, "AclCli")
    sent = js("sendMessage", "-t", "AclCli", "-p", "signed", *admin, *ns)[0]
    assert sent["sendStatus"] == "SEND_OK"
    assert js("queryMsgById", "-i", sent["offsetMsgId"], *admin, *ns)["body"] == "signed"
