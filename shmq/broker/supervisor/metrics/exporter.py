"""The supervisor's end of the broker metrics: builds the collector, follows the queues, takes
the workers' pushes, and serves ``/metrics`` on ``metricsPromExporterHost:metricsPromExporterPort``
(prometheus_client's own HTTP server, a daemon thread: a scrape never waits for the event loop).
"""
from __future__ import annotations

import logging
import threading
from bisect import bisect_left

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import HistogramMetricFamily

from shmq.protocol.rpc_stats import cumulative

from .collector import BASE, BrokerCollector
from .feeds import WorkerFeeds
from .tail import QueueTail

log = logging.getLogger("shmq.broker.metrics")

#: Flush latency buckets in seconds (an msync of a few KiB to a few hundred MiB).
FLUSH_BOUNDS_S = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0, 5.0)


class FlushHistogram:
    """Observed by the flush thread, read by the scrape thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts = [0] * (len(FLUSH_BOUNDS_S) + 1)
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        with self._lock:
            self.counts[bisect_left(FLUSH_BOUNDS_S, seconds)] += 1
            self.total += seconds

    def family(self, base: list[str]) -> HistogramMetricFamily:
        with self._lock:
            counts, total = list(self.counts), self.total
        h = HistogramMetricFamily("shmq_flush_latency_seconds", "Seconds each CommitLog flush (msync) took.",
                                  labels=list(BASE))
        h.add_metric(base, cumulative(FLUSH_BOUNDS_S, counts), total)
        return h


def enabled(cfg) -> bool:
    return str(cfg.metricsExporterType).upper() == "PROM"


class BrokerMetrics:
    def __init__(self, cfg, store, topics, clients):
        self.cfg = cfg
        self.feeds = WorkerFeeds()
        self.tail = QueueTail(store, cfg.metricsPushIntervalMillis / 1000.0)
        self.flush = FlushHistogram()
        self.collector = BrokerCollector(cfg, store, topics, clients, self.feeds, self.tail, self.flush)
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        self.store = store
        self._server = None
        self._thread = None
        self.port = 0

    def start(self) -> None:
        flusher = getattr(self.store, "flusher", None)
        if flusher is not None:
            flusher.on_flush = self.flush.observe
        self.tail.pass_once()  # the store's content before this start is counted at once
        self.tail.start()
        self._server, self._thread = start_http_server(self.cfg.metricsPromExporterPort,
                                                       addr=self.cfg.metricsPromExporterHost, registry=self.registry)
        self.port = self._server.server_port
        log.info("metrics on http://%s:%d/metrics", self.cfg.metricsPromExporterHost, self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.tail.stop()
        flusher = getattr(self.store, "flusher", None)
        if flusher is not None:
            flusher.on_flush = None
