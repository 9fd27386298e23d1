"""Prometheus metrics of a running broker after a known workload, parsed with prometheus_client's
own text parser: remote sends through the workers, local sends that never pass one, pulls by
a group through both workers, committed offsets that leave a known lag."""
from __future__ import annotations

import socket
import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from shmq import Message, Producer
from shmq.protocol import RequestCode, SyncRemotingClient, request

from .broker_helpers import create_topic, pull, send, start_broker  # noqa: F401
from .client_helpers import wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(port: int) -> dict[str, list]:
    """family name -> [(sample name, labels, value)]."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out: dict[str, list] = {}
    for fam in text_string_to_metric_families(text):
        out[fam.name] = [(s.name, s.labels, s.value) for s in fam.samples]
    return out


def value(m: dict, sample: str, **labels) -> float | None:
    for samples in m.values():
        for name, lv, v in samples:
            if name == sample and all(lv.get(k) == str(x) for k, x in labels.items()):
                return v
    return None


def wait_value(port: int, sample: str, want, timeout: float = 10.0, **labels):
    deadline = time.monotonic() + timeout
    while True:
        m = scrape(port)
        v = value(m, sample, **labels)
        if (want(v) if callable(want) else v == want) or time.monotonic() > deadline:
            return m, v
        time.sleep(0.1)


def test_scrape_after_known_workload(namesrv, start_broker):
    port = free_port()
    b = start_broker(namesrv, workers=2, settings={"metricsExporterType": "PROM", "metricsPromExporterPort": port,
                                                   "metricsPushIntervalMillis": 100, "brokerClusterName": "MetC"})
    c = SyncRemotingClient(b.addr)
    c2 = SyncRemotingClient(b.addr)  # likely the other worker: counts from both must add up
    try:
        assert create_topic(c, "MetT", queues=2).code == 0
        for i in range(10):
            assert send(c if i % 2 else c2, "MetT", b"r" * 100, queue_id=i % 2).code == 0
        wait_route(namesrv.addr, "MetT")
        with Producer("met-local", namesrv.addr, local="always") as p:
            for i in range(5):
                p.send(Message("MetT", b"l" * 200))
        m = scrape(port)
        node = dict(cluster="MetC", node_type="broker", node_id="broker-0")
        assert value(m, "rocketmq_messages_in_total", topic="MetT", message_type="normal", **node) == 15
        maxes = [int(c.invoke(request(RequestCode.GET_MAX_OFFSET, topic="MetT", queueId=q)).ext_fields["offset"])
                 for q in (0, 1)]
        assert sum(maxes) == 15
        # the group pulls everything, through both connections, and commits all but one message
        for q in (0, 1):
            r = pull(c if q else c2, "MetT", q, 0, group="met-g")
            assert r.code == 0
        assert c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="met-g", topic="MetT",
                                queueId=0, commitOffset=maxes[0])).code == 0
        assert c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="met-g", topic="MetT",
                                queueId=1, commitOffset=maxes[1] - 1)).code == 0
        g = dict(topic="MetT", consumer_group="met-g", **node)
        m, v = wait_value(port, "rocketmq_messages_out_total", 15, **g)
        assert v == 15
        assert value(m, "rocketmq_throughput_out_total", **g) > 15 * 100
        assert value(m, "rocketmq_consumer_lag_messages", **g) == 1
        assert value(m, "rocketmq_consumer_inflight_messages", **g) == 1
        assert value(m, "rocketmq_consumer_ready_messages", **g) == 0
        assert value(m, "rocketmq_consumer_lag_latency", **g) > 0
        m, v = wait_value(port, "rocketmq_message_size_count", 15, topic="MetT")
        assert v == 15
        assert value(m, "rocketmq_message_size_bucket", topic="MetT", le="1024.0") == 15
        body_bytes = 10 * 100 + 5 * 200
        assert body_bytes < value(m, "rocketmq_throughput_in_total", topic="MetT") < body_bytes + 15 * 400
        assert value(m, "rocketmq_message_size_sum", topic="MetT") == value(m, "rocketmq_throughput_in_total", topic="MetT")
        # the 10 remote sends went through the workers (rpc latency counted per request code)
        assert value(m, "rocketmq_rpc_latency_count", request_code=int(RequestCode.SEND_MESSAGE_V2),
                     response_code=0, protocol_type="remoting") == 10
        assert value(m, "shmq_worker_appends_total") == 10
        assert value(m, "shmq_local_appends_total") >= 5
        assert value(m, "shmq_lock_acquires_total") >= 15
        assert value(m, "rocketmq_storage_size") >= 4 * 1024 * 1024
        assert value(m, "rocketmq_storage_flush_behind_bytes") is not None
        assert value(m, "shmq_flush_latency_seconds_count") is not None
        # a deleted topic's series are gone at the next scrape
        assert c.invoke(request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="MetT")).code == 0
        m = scrape(port)
        assert value(m, "rocketmq_messages_in_total", topic="MetT") is None
        assert value(m, "rocketmq_consumer_lag_messages", topic="MetT") is None
        assert value(m, "rocketmq_messages_out_total", topic="MetT") is None
    finally:
        c.close()
        c2.close()


def test_namesrv_metrics(start_namesrv, start_broker):
    port = free_port()
    ns = start_namesrv(settings={"metricsExporterType": "PROM", "metricsPromExporterPort": port})
    start_broker(ns, workers=1, settings={"brokerClusterName": "NsC"})
    wait_route(ns.addr, "TBW102")
    m, v = wait_value(port, "shmq_namesrv_brokers", 1, cluster="NsC")
    assert v == 1
    assert value(m, "rocketmq_rpc_latency_count", request_code=int(RequestCode.REGISTER_BROKER),
                 response_code=0, node_type="nameserver") >= 1
    assert value(m, "shmq_namesrv_topics") >= 1
