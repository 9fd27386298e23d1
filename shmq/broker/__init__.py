"""The broker: one supervisor process and N worker processes mapping the same store.

- ``supervisor/``: runs in the supervisor (store owner, control-plane tables, NameServer
  registration, delay scheduling, transaction check-back, housekeeping); entry point
  :class:`shmq.broker.supervisor.main.Supervisor`.
- ``worker/``: runs in each worker (RocketMQ remoting over TCP: request dispatch, one
  processor module per request family, long-poll holds); entry point
  ``python -m shmq.broker.worker.main``.
- ``shared/``: imported by both (config, the control channel protocol, the topic table).

``supervisor`` and ``worker`` never import each other; ``shared`` imports neither.
"""
