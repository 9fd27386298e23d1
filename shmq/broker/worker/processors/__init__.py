"""Request processors of a broker worker, one module per request family: each has a
``Processor(ctx)`` (``ctx`` a :class:`shmq.broker.worker.context.WorkerContext`) whose
``handlers()`` maps request codes to handlers; ``worker/dispatch.py`` merges them."""
