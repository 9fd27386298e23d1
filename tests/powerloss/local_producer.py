"""A local producer for the power-loss runs: attaches to the broker's store (the shared
mapping, no TCP) and appends through the store's one writer until it is killed. After each
put that returned (under SYNC_FLUSH: after its flush) it appends ``<id> <monotonic time>`` to
ACKFILE with one unbuffered write, so a SIGKILL loses no acknowledgement. It pauses 0.5 ms
after each put: unpaced, the local path appends faster than this machine's disk (and the
trace's copy) flushes, and ASYNC_FLUSH's backlog (what a cut may take) is then the disk's
lag, not one flush interval.

    python -m tests.powerloss.local_producer ROOT BASE SEED ACKFILE
"""
from __future__ import annotations

import os
import random
import sys
import time

from shmq.errors import ShmqError
from shmq.store import MessageStore

from .load import QUEUES, TOPIC, make_body


def main(argv: list[str]) -> int:
    root, base, seed, ackfile = argv[0], int(argv[1]), int(argv[2]), argv[3]
    rng = random.Random(seed)
    store = MessageStore.attach(root, lock_timeout_ms=20000)
    writers = [store.queue_writer(TOPIC, q) for q in range(QUEUES)]
    ack = os.open(ackfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    print("ready", flush=True)
    n = 0
    while True:
        mid = base + n
        n += 1
        try:
            writers[rng.randrange(QUEUES)].put(make_body(mid, rng))
        except ShmqError:
            continue  # FlushDiskTimeout and the like: not acknowledged
        os.write(ack, b"%d %.6f\n" % (mid, time.monotonic()))
        time.sleep(0.0005)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
