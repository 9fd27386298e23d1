"""The broker's Prometheus collector (supervisor side): every value is computed at scrape time
from tables already in memory (the control block, the topic table, the client registry, the
workers' last pushes, the queue tail's byte counts), never by scanning the store.

Names, labels and units are RocketMQ 5's (BrokerMetricsConstant; counts, bytes,
milliseconds); shmq's own metrics are prefixed ``shmq_`` and follow Prometheus' conventions.
"""
from __future__ import annotations

import struct
import time

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from shmq.protocol.rpc_stats import BOUNDS_MS, cumulative

from shmq.message.layout import R_STORETS

from .tail import SIZE_BOUNDS

_I64 = struct.Struct(">q")

BASE = ("cluster", "node_type", "node_id")
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"


def message_type(topic: str, tc) -> str:
    """RocketMQ 5's TopicMessageType metrics value: what a message stored in ``topic`` is."""
    if topic == SCHEDULE_TOPIC:
        return "delay"
    if topic == HALF_TOPIC:
        return "transaction"
    return "fifo" if tc is not None and tc.order else "normal"


class BrokerCollector:
    def __init__(self, cfg, store, topics, clients, feeds, tail, flush_hist=None, clock=time.time):
        self.base = [cfg.brokerClusterName, "broker", cfg.brokerName]
        self.store = store
        self.topics = topics
        self.clients = clients
        self.feeds = feeds
        self.tail = tail
        self.flush_hist = flush_hist
        self.clock = clock
        self.last_scrape_seconds = 0.0

    def describe(self):
        return []  # unchecked collector: the families depend on the tables

    def collect(self):
        t0 = time.perf_counter()
        live = {n: self.topics.get(n) for n in self.topics.names()}
        queues = self._queues(live)
        puts, rpc, out, pulled = self.feeds.totals()
        yield from self._messages(live, queues)
        yield from self._consumers(live, queues, out, pulled)
        yield from self._connections()
        yield from self._storage()
        yield self._rpc(rpc)
        yield from self._shmq(puts)
        self.feeds.forget(live)
        self.last_scrape_seconds = time.perf_counter() - t0

    # ---- tables ---------------------------------------------------------------------------
    def _queues(self, live) -> dict[str, dict[int, tuple[int, int]]]:
        """topic -> {queue id: (next offset, min offset)} of live topics."""
        out: dict[str, dict[int, tuple[int, int]]] = {}
        for _, topic, qid, nxt, mn in self.store.cb.iter_queue_slots():
            if topic in live:
                out.setdefault(topic, {})[qid] = (nxt, mn)
        return out

    def _offsets(self, queues) -> dict[tuple[str, str], dict[int, int]]:
        """(topic, group) -> {queue id: committed offset} of live topics, committed ones only."""
        out: dict[tuple[str, str], dict[int, int]] = {}
        for _, key, qid, off in self.store.cb.iter_offset_slots():
            if off < 0:
                continue
            topic, _, group = key.partition("@")
            if topic in queues:
                out.setdefault((topic, group), {})[qid] = off
        return out

    # ---- families -------------------------------------------------------------------------
    def _messages(self, live, queues):
        labels = [*BASE, "topic", "message_type"]
        m_in = CounterMetricFamily("rocketmq_messages_in_total", "Messages stored, by topic (from the queues' published offsets; local producers included).", labels=labels)
        b_in = CounterMetricFamily("rocketmq_throughput_in_total", "Bytes stored (record sizes), by topic.", labels=labels)
        size = HistogramMetricFamily("rocketmq_message_size", "Size of stored records in bytes.", labels=labels)
        tail = self.tail.snapshot() if self.tail is not None else {}
        for topic, qs in queues.items():
            lv = [*self.base, topic, message_type(topic, live[topic])]
            m_in.add_metric(lv, float(sum(nxt for nxt, _ in qs.values())))
            nbytes, count, buckets = tail.get(topic, (0, 0, [0] * (len(SIZE_BOUNDS) + 1)))
            b_in.add_metric(lv, float(nbytes))
            size.add_metric(lv, cumulative(SIZE_BOUNDS, buckets), float(nbytes))
        yield m_in
        yield b_in
        yield size

    def _consumers(self, live, queues, out, pulled):
        labels = [*BASE, "topic", "consumer_group"]
        fam = {name: GaugeMetricFamily(name, doc, labels=labels) for name, doc in (
            ("rocketmq_consumer_lag_messages", "Messages stored and not yet committed by the group."),
            ("rocketmq_consumer_ready_messages", "Messages stored and not yet pulled by the group."),
            ("rocketmq_consumer_inflight_messages", "Messages pulled and not yet committed."),
            ("rocketmq_consumer_lag_latency", "Milliseconds since the oldest uncommitted message was stored (0 when none)."))}
        m_out = CounterMetricFamily("rocketmq_messages_out_total", "Messages pulled through broker workers.", labels=labels)
        b_out = CounterMetricFamily("rocketmq_throughput_out_total", "Bytes pulled through broker workers.", labels=labels)
        now_ms = int(self.clock() * 1000)
        for (topic, group), committed in self._offsets(queues).items():
            lag = ready = inflight = 0
            oldest = None
            for qid, (nxt, mn) in queues[topic].items():
                c = max(committed.get(qid, mn), mn)
                p = min(max(pulled.get((topic, group, qid), c), c), nxt)
                lag += max(nxt - c, 0)
                ready += max(nxt - p, 0)
                inflight += p - c
                if nxt > c:
                    ts = self._store_time(topic, qid, c)
                    if ts > 0 and (oldest is None or ts < oldest):
                        oldest = ts
            lv = [*self.base, topic, group]
            fam["rocketmq_consumer_lag_messages"].add_metric(lv, lag)
            fam["rocketmq_consumer_ready_messages"].add_metric(lv, ready)
            fam["rocketmq_consumer_inflight_messages"].add_metric(lv, inflight)
            fam["rocketmq_consumer_lag_latency"].add_metric(lv, max(now_ms - oldest, 0) if oldest else 0)
        for (topic, group), (m, b) in out.items():
            if topic in live:
                m_out.add_metric([*self.base, topic, group], m)
                b_out.add_metric([*self.base, topic, group], b)
        yield from fam.values()
        yield m_out
        yield b_out

    def _store_time(self, topic: str, qid: int, offset: int) -> int:
        """Store time of the message at a queue offset: one ConsumeQueue entry and one record
        header read (0 when the file expired or the entry is not there)."""
        try:
            e = self.store.queues.get(topic, qid).entry(offset)
            rec = self.store.read_at(e[0]) if e else None
            return _I64.unpack_from(rec, R_STORETS)[0] if rec is not None else 0
        except Exception:  # an expired or racing file: no latency rather than a failed scrape
            return 0

    def _connections(self):
        prod = GaugeMetricFamily("rocketmq_producer_connections", "Producer connections.", labels=[*BASE, "language", "version"])
        cons = GaugeMetricFamily("rocketmq_consumer_connections", "Consumer connections.",
                                 labels=[*BASE, "consumer_group", "language", "version", "consume_mode"])
        counts: dict[tuple, int] = {}
        for chans in self.clients.producers.values():
            for ch in chans.values():
                k = (ch.language, str(ch.version))
                counts[k] = counts.get(k, 0) + 1
        for (lang, ver), n in counts.items():
            prod.add_metric([*self.base, lang, ver], n)
        for g in self.clients.consumers.values():
            per: dict[tuple, int] = {}
            for ch in g.channels.values():
                k = (ch.language, str(ch.version))
                per[k] = per.get(k, 0) + 1
            mode = "push" if "PASSIVELY" in g.consume_type else "pull"
            for (lang, ver), n in per.items():
                cons.add_metric([*self.base, g.group, lang, ver, mode], n)
        yield prod
        yield cons

    def _storage(self):
        s = self.store
        commit, flushed = s.cb.commit_pos, s.cb.flushed_pos
        disp = getattr(s, "dispatcher", None)
        dispatched = disp.pos if disp is not None else commit
        files = s.commitlog.file_indexes()
        for name, doc, value in (
                ("rocketmq_storage_size", "Bytes of CommitLog files on disk.", len(files) * s.commitlog.file_size),
                ("rocketmq_storage_flush_behind_bytes", "Bytes committed and not yet flushed.", max(commit - flushed, 0)),
                ("rocketmq_storage_dispatch_behind_bytes", "Bytes committed and not yet indexed.", max(commit - dispatched, 0)),
                ("rocketmq_storage_message_reserve_time", "Milliseconds since the oldest stored message.", self._reserve_ms()),
                ("shmq_storage_read_only", "1 once a flush failed (I/O error): the store refuses writes until a restart.",
                 1 if s.cb.ctl.pos.io_error else 0),
                ("shmq_index_held_back", "1 while a full disk holds indexing back (no room for the next IndexFile).",
                 1 if disp is not None and disp.disk_full else 0)):
            g = GaugeMetricFamily(name, doc, labels=list(BASE))
            g.add_metric(self.base, value)
            yield g

    def _reserve_ms(self) -> int:
        s = self.store
        try:
            rec = s.read_at(s.cb.min_pos)  # the first record of the oldest file
            if rec is None:
                return 0
            return max(int(self.clock() * 1000) - _I64.unpack_from(rec, R_STORETS)[0], 0)
        except Exception:  # the first file just expired: no value rather than a failed scrape
            return 0

    def _rpc(self, rpc):
        h = HistogramMetricFamily("rocketmq_rpc_latency", "Remoting request latency in milliseconds, served by broker workers.",
                                  labels=[*BASE, "protocol_type", "request_code", "response_code"])
        for (code, resp), row in sorted(rpc.items()):
            h.add_metric([*self.base, "remoting", str(code), str(resp)], cumulative(BOUNDS_MS, row[:-1]), row[-1])
        return h

    def _shmq(self, worker_puts: int):
        c = self.store.cb.ctl
        total = int(c.pos.appends)

        def counter(name, doc, value, labels=(), lv=()):
            f = CounterMetricFamily(name, doc, labels=[*BASE, *labels])
            f.add_metric([*self.base, *lv], value)
            return f
        yield counter("shmq_store_appends_total", "Records appended since the broker started, by anyone.", total)
        yield counter("shmq_worker_appends_total", "Records put by broker workers (remote producers).", worker_puts)
        yield counter("shmq_local_appends_total", "Records appended outside the workers: local producers "
                      "(and the supervisor's own re-puts: delayed messages coming due).", max(total - worker_puts, 0))
        yield counter("shmq_lock_acquires_total", "Append lock acquisitions.", int(c.lock.acquires))
        yield counter("shmq_lock_steals_total", "Append locks taken over from a dead holder.", int(c.lock.steals))
        rep = CounterMetricFamily("shmq_lock_repairs_total", "Dead holders' appends repaired, by outcome.", labels=[*BASE, "outcome"])
        rep.add_metric([*self.base, "completed"], int(c.lock.repairs_completed))
        rep.add_metric([*self.base, "rolled_back"], int(c.lock.repairs_rolled_back))
        yield rep
        w = GaugeMetricFamily("shmq_lock_waiters", "Processes sleeping on the append lock now.", labels=list(BASE))
        w.add_metric(self.base, int(c.lock.sleepers))
        yield w
        yield counter("shmq_flushes_total", "CommitLog msync passes.", int(c.pos.flush_count))
        if self.flush_hist is not None:
            yield self.flush_hist.family(self.base)
        yield from self._recovery()

    def _recovery(self):
        r = getattr(self.store, "recovery", None)
        g = GaugeMetricFamily("shmq_recovery", "What the last start's recovery did, by what it counted.",
                              labels=[*BASE, "what"])
        if r is not None:
            for what in ("records_scanned", "cq_entries_written", "cq_entries_cut", "bytes_zeroed"):
                g.add_metric([*self.base, what], getattr(r, what))
            g.add_metric([*self.base, "files_deleted"], len(r.files_deleted))
        yield g
