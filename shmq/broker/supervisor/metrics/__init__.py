"""Prometheus metrics of a broker (supervisor side) (``metricsExporterType=PROM``), named as RocketMQ 5 names them.

How counts reach the exporter, and why this way:

* The supervisor runs the exporter (``metricsPromExporterHost:metricsPromExporterPort``) and
  computes everything it can from the store's shared tables at scrape time, which cost no
  store scan: messages in per topic are the sum of the queues' published next offsets in the
  topic-queue table (so local producers, which never pass a worker, are counted, and the
  send path does no counting at all); lag, ready and in-flight messages come from the same
  table and the consumer-offset table; flush and dispatch lag from the published positions;
  the lock counters from the control block.
* Bytes in and the message-size histogram are read by a supervisor thread that follows each
  queue's ConsumeQueue from where it last stopped (20-byte entries carry each record's size):
  cost proportional to the messages appended, off every hot path, and only when metrics are on.
* What only a worker sees (messages and bytes pulled, the last pulled offset per queue, rpc
  latency per request code) is counted in plain Python counters by the worker
  (``shmq.broker.worker.metrics``) and pushed, cumulative, to the supervisor over the control channel
  every ``metricsPushIntervalMillis``; a push replaces that worker's previous one (idempotent),
  and the counts of a worker that died stay in the totals, so counters never go back.
* Messages out count what the workers serve: a local consumer reading the mapped store
  directly is not counted there, but its committed offsets show in the lag gauges.
* Series exist only for topics in the topic table and groups with a committed offset on one:
  a deleted topic or group disappears at the next scrape.
"""
