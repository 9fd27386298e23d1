"""shmq-bench: the latency and throughput harness, shmq side by side with its peers
(multiprocessing.Queue, faster-fifo, pyzmq over ipc, Redis Streams).

Modules: ``scenarios`` (what is measured), ``histogram`` (HDR latency, coordinated-omission
pacing), ``loops`` (the producer and consumer loops every adapter runs), ``engine`` (one run
in separate processes), ``peers/`` (adapters), ``services`` (servers the run starts and
their cleanup), ``runner`` (suites, table, JSON), ``plot`` (PNG charts).
The command is ``shmq-bench`` (shmq/cli/bench.py)."""
