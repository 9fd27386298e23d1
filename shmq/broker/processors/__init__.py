"""Request processors of a broker worker, one module per request family: each has a
``Processor(worker)`` whose ``handlers()`` maps request codes to handlers."""
