"""The broker's metrics collector over a real store, without workers: 10,000 topic/group pairs
are scraped over HTTP and hold the right series; deleted topics and groups lose theirs.
(The scrape time is printed; bench/RESULTS.md records it. No timed assertion.)"""
from __future__ import annotations

import time
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from shmq.broker.supervisor.clients import ClientRegistry
from shmq.broker.shared.config import BrokerConfig
from shmq.broker.supervisor.metrics.exporter import BrokerMetrics
from shmq.broker.shared.topics import TopicTable
from shmq.protocol.bodies import TopicConfig

TOPICS, QUEUES, GROUPS = 1000, 2, 10  # 10,000 (topic, group) pairs, 20,000 committed queue offsets


def scrape(port: int):
    t0 = time.perf_counter()
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read().decode()
    took = time.perf_counter() - t0
    series: dict[str, dict] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            series.setdefault(s.name, {})[(s.labels.get("topic"), s.labels.get("consumer_group"))] = s.value
    return series, took, len(text)


def test_ten_thousand_pairs_then_deletions(open_store):
    store = open_store(queue_capacity=4096, offset_capacity=32768, mapped_file_size_commitlog=8 << 20)
    topics = TopicTable(None)
    topics.put_many([TopicConfig(topicName=f"T{i}", readQueueNums=QUEUES, writeQueueNums=QUEUES) for i in range(TOPICS)])
    for i in range(TOPICS):
        for q in range(QUEUES):
            for _ in range(3):
                store.put(f"T{i}", q, b"x" * 50)
            for g in range(GROUPS):
                store.commit_offset(f"G{g}", f"T{i}", q, g % 4)  # 3 - min(g % 4, 3) lag per queue
    cfg = BrokerConfig(metricsExporterType="PROM", metricsPromExporterPort=0, brokerName="bk")
    m = BrokerMetrics(cfg, store, topics, ClientRegistry())
    m.start()
    try:
        series, took, size = scrape(m.port)
        print(f"\nscrape of {TOPICS * GROUPS} topic/group pairs: {took * 1000:.0f} ms over HTTP, "
              f"collect+format {m.collector.last_scrape_seconds * 1000:.0f} ms, {size / 1e6:.1f} MB of text")
        lag = series["rocketmq_consumer_lag_messages"]
        assert len(lag) == TOPICS * GROUPS
        for g in range(GROUPS):
            assert lag[("T7", f"G{g}")] == QUEUES * (3 - min(g % 4, 3))
        assert len(series["rocketmq_messages_in_total"]) >= TOPICS
        assert series["rocketmq_messages_in_total"][("T999", None)] == QUEUES * 3
        assert series["rocketmq_message_size_count"][("T5", None)] == QUEUES * 3

        # a deleted topic: its series go; a group whose offsets are dropped: its series go
        topics.delete("T7")
        for q in range(QUEUES):
            store.commit_offset("G3", "T8", q, -1)
        series, _, _ = scrape(m.port)
        lag = series["rocketmq_consumer_lag_messages"]
        assert ("T7", "G0") not in lag and ("T7", None) not in series["rocketmq_messages_in_total"]
        assert ("T8", "G3") not in lag and ("T8", "G2") in lag
        assert len(lag) == TOPICS * GROUPS - GROUPS - 1
    finally:
        m.stop()
