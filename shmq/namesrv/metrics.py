"""Prometheus metrics of a NameServer (``metricsExporterType=PROM`` in its config), on
``metricsPromExporterHost:metricsPromExporterPort``: RocketMQ 5's ``rocketmq_rpc_latency``
(milliseconds, per request and response code; node_type ``nameserver``) and shmq's gauges of
the route table (live brokers per cluster, topics). One process: the timing wrapper's
counters are read directly at scrape time, on prometheus_client's HTTP thread.
"""
from __future__ import annotations

import logging

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from shmq.protocol.rpc_stats import BOUNDS_MS, RpcStats, cumulative

log = logging.getLogger("shmq.namesrv")


class NamesrvCollector:
    def __init__(self, node_id: str, table, rpc: RpcStats):
        self.node_id = node_id
        self.table = table
        self.rpc = rpc

    def describe(self):
        return []

    def collect(self):
        base = ["nameserver", self.node_id]
        h = HistogramMetricFamily("rocketmq_rpc_latency", "Remoting request latency in milliseconds.",
                                  labels=["node_type", "node_id", "protocol_type", "request_code", "response_code"])
        for code, resp, counts, total in sorted(self.rpc.rows()):
            h.add_metric([*base, "remoting", str(code), str(resp)], cumulative(BOUNDS_MS, counts), total)
        yield h
        b = GaugeMetricFamily("shmq_namesrv_brokers", "Live broker addresses registered, by cluster.",
                              labels=["node_type", "node_id", "cluster"])
        per: dict[str, int] = {}
        for live in list(self.table.broker_live.values()):
            per[live.cluster] = per.get(live.cluster, 0) + 1
        for cluster, n in sorted(per.items()):
            b.add_metric([*base, cluster], n)
        yield b
        t = GaugeMetricFamily("shmq_namesrv_topics", "Topics in the route table.", labels=["node_type", "node_id"])
        t.add_metric(base, len(self.table.topic_queue))
        yield t


class NamesrvMetrics:
    def __init__(self, config, table):
        self.config = config
        self.rpc = RpcStats()
        self.table = table
        self.registry = CollectorRegistry(auto_describe=False)
        self._server = None
        self.port = 0

    def start(self, node_id: str) -> None:
        self.registry.register(NamesrvCollector(node_id, self.table, self.rpc))
        self._server, _ = start_http_server(self.config.metricsPromExporterPort,
                                            addr=self.config.metricsPromExporterHost, registry=self.registry)
        self.port = self._server.server_port
        log.info("metrics on http://%s:%d/metrics", self.config.metricsPromExporterHost, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
