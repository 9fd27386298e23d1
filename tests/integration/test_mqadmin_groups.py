"""The mqadmin-named commands that read the broker's statistics and client tables, or change
its subscription groups (request codes 200, 202, 203, 204, 207, 208, 26, 300, 306), against a
live broker with a running producer and push consumer."""
from __future__ import annotations

from shmq import Message, Producer

from .broker_helpers import start_broker  # noqa: F401
from .client_helpers import Collector, consumer, wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401
from .test_mqadmin_cli import js, run


def test_stats_connections_and_groups(namesrv, start_broker):
    b = start_broker(namesrv)
    ns = ["-n", namesrv.addr]
    run("updateTopic", "-t", "St", "-w", "2", "-c", "DefaultCluster", *ns)
    wait_route(namesrv.addr, "St")
    col = Collector()
    with Producer("st-p", namesrv.addr, local="never") as p:
        for i in range(6):
            p.send(Message("St", b"s%d" % i))
        c = consumer(namesrv.addr, "st-g", "St", col)
        try:
            assert col.wait_for(lambda s: len(s.msgs) >= 6)
            status = js("topicStatus", "-t", "St", *ns)
            assert sum(r["max_offset"] for r in status) == 6
            assert all(r["last_update_ms"] > 0 for r in status if r["max_offset"])  # from 202
            conn = js("consumerConnection", "-g", "st-g", *ns)
            assert len(conn["connections"]) == 1 and conn["subscriptions"]["St"] == "*"  # and its %RETRY% topic
            assert "CLUSTERING" in conn["message_model"]
            assert len(js("producerConnection", "-g", "st-p", "-t", "St", *ns)) == 1
            groups = js("topicList", "-c", *ns)
            assert {"cluster": "DefaultCluster", "topic": "St", "consumer group": "st-g"} in groups
            prog = js("consumerProgress", "-g", "st-g", "-t", "St", *ns)
            assert sum(r["brokerOffset"] for r in prog) == 6
            stats = run("statsAll", "-t", "St", *ns).stdout
            assert "st-g" in stats
        finally:
            c.shutdown()
    assert "success" in run("updateSubGroup", "-g", "sg-new", "-c", "DefaultCluster", "-r", "3", *ns).stdout
    assert "success" in run("deleteSubGroup", "-g", "sg-new", "-c", "DefaultCluster", *ns).stdout
    cfg = js("getBrokerConfig", "-b", b.addr, *ns)[b.addr]
    assert cfg["brokerName"] == "broker-0"
    assert js("cleanExpiredCQ", "-c", "DefaultCluster", *ns) == {b.addr: True}
