"""``shmq up --slaves 1`` starts a NameServer, a master and its slave on one host: the pair
is in the route (brokerIds 0 and 1) and the slave follows the master."""
from __future__ import annotations

import sys

from shmq import Message, Producer
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import decode_topic_route

from .conftest import start_process
from .ha_helpers import commit_pos, wait_until


def test_shmq_up_with_a_slave(processes, tmp_path):
    argv = [sys.executable, "-c", "from shmq.cli.main import main; main()", "up", "--slaves", "1",
            "--port", "0", "--namesrv-port", "0", "--workers", "1", "--dir", str(tmp_path / "s"),
            "--set", "registerNameServerPeriod=1000", "--set", "mappedFileSizeCommitLog=4194304",
            "--set", "diskMaxUsedSpaceRatio=95", "--log-level", "INFO"]
    p = start_process(argv, r"clients: namesrvAddr=(\S+)", tmp_path / "up.log", timeout=60)
    processes.append(p)
    ns = p.match.group(1)
    with Producer("up-pg", ns, local="never") as prod:
        for i in range(50):
            assert prod.send(Message("UpHA", b"u%d" % i)).status.value == "SEND_OK"

    def pair():
        with SyncRemotingClient(ns, timeout=5) as c:
            r = c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="UpHA"))
        addrs = decode_topic_route(r.body).brokerDatas[0].brokerAddrs if r.code == 0 else {}
        return addrs if set(addrs) == {0, 1} else None
    addrs = wait_until(pair, what="master and slave in the route")
    end = commit_pos(addrs[0])
    wait_until(lambda: commit_pos(addrs[1]) == end, what="the slave to follow")
