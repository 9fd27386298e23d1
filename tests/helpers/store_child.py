"""A child process that appends to a store, for multi-process and crash tests.

    python -m tests.helpers.store_child ROOT write WID N QUEUES [ACKFILE] [KILL_AT POINT]
        attach, put N messages "WID:i" on queues i % QUEUES of topic T; after each
        acknowledged put write "i\\n" to ACKFILE (unbuffered, so a SIGKILL loses none);
        with KILL_AT/POINT: at message KILL_AT arm fault POINT with the kill action.
    python -m tests.helpers.store_child ROOT hold POINT WID
        arm fault POINT with the pause action and put one message: the process stops
        inside the append holding the lock until it is killed.
    python -m tests.helpers.store_child ROOT stop POINT WID
        arm fault POINT with the stop action and put one message: the process stops itself
        (SIGSTOP) inside the append holding the lock; after SIGCONT it finishes and exits 0.
    python -m tests.helpers.store_child ROOT batch WID N BATCH QUEUES
        like write, in batches of BATCH messages (one lock per batch).
    python -m tests.helpers.store_child ROOT spread WID N ACKFILE [KILL_AT POINT]
        put N messages "WID:i", each the first of a new queue (topic WID-i//8, queue i % 8),
        acknowledged as in write.
    python -m tests.helpers.store_child ROOT prepare PREFIX TOPICS
        as a local producer learning routes: shmq_cq_prepare every queue (0..7) of topics
        PREFIX-0 .. PREFIX-(TOPICS-1), over and over (prints "ready" after the first pass),
        until killed.
    python -m tests.helpers.store_child ROOT own-spread WID N ACKFILE
        open the store as its owner (recovering it), then spread; waits to be killed after.
"""
from __future__ import annotations

import os
import sys

from shmq.message.batch import encode_batch
from shmq.native import lib
from shmq.store import MessageStore


def own(root: str, argv: list[str]) -> int:
    """Owner mode: open the store as its broker would, put N messages, report, then wait to be
    killed (crash tests)."""
    import time

    from shmq.store import StoreConfig
    fsize, per, n, queues = (int(a) for a in argv[:4])
    sync = len(argv) > 4 and argv[4] == "sync"
    cfg = StoreConfig(root=root, mapped_file_size_commitlog=fsize, cq_entries_per_file=per,
                      max_hash_slot_num=1024, max_index_num=4096, flush_disk_type=1 if sync else 0,
                      disk_max_used_space_ratio=100,
                      flush_interval_commitlog_ms=50, flush_interval_consume_queue_ms=100)
    store = MessageStore.open(cfg)
    for i in range(n):
        store.put("T", i % queues, b"own:%d" % i, {"KEYS": f"k{i}"})
    print(f"ready {store.commit_pos}", flush=True)
    while True:
        time.sleep(1)


def spread(store, wid: str, n: int, ack_path: str, kill_at: int = -1, point: int = 0) -> None:
    ack = os.open(ack_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    for i in range(n):
        if i == kill_at:
            store.appender.set_fault(point, lib.SHMQ_FA_KILL)
        store.queue_writer(f"{wid}-{i // 8}", i % 8).put(f"{wid}:{i}".encode())
        os.write(ack, b"%d\n" % i)


def main(argv: list[str]) -> int:
    root, mode = argv[0], argv[1]
    if mode == "own":
        return own(root, argv[2:])
    if mode == "own-spread":
        import time

        from shmq.store import StoreConfig
        cfg = StoreConfig(root=root, mapped_file_size_commitlog=64 * 1024, cq_entries_per_file=100,
                          max_hash_slot_num=1024, max_index_num=4096, disk_max_used_space_ratio=100,
                          flush_interval_commitlog_ms=50, flush_interval_consume_queue_ms=100)
        store = MessageStore.open(cfg)
        spread(store, argv[2], int(argv[3]), argv[4])
        print("done", flush=True)
        while True:
            time.sleep(1)
    store = MessageStore.attach(root, lock_timeout_ms=20000)
    if mode == "prepare":
        a = store.appender
        for k in range(1 << 30):
            for t in range(int(argv[3])):
                for q in range(8):
                    slot = a.slot(f"{argv[2]}-{t}", q)
                    if lib.shmq_cq_prepare(a.w, slot) == lib.SHMQ_ENEEDCQ:
                        a.map_cq(slot, a.w.need_index)
            if k == 0:
                print("ready", flush=True)
    if mode == "spread":
        spread(store, argv[2], int(argv[3]), argv[4], *(int(a) for a in argv[5:7]))
    if mode == "write":
        wid, n, queues = argv[2], int(argv[3]), int(argv[4])
        ack = os.open(argv[5], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600) if len(argv) > 5 and argv[5] != "-" else None
        kill_at = int(argv[6]) if len(argv) > 6 else -1
        point = int(argv[7]) if len(argv) > 7 else 0
        writers = [store.queue_writer("T", q) for q in range(queues)]
        for i in range(n):
            if i == kill_at:
                store.appender.set_fault(point, lib.SHMQ_FA_KILL)
            writers[i % queues].put(f"{wid}:{i}".encode(), b"KEYS\x01k" + wid.encode())
            if ack is not None:
                os.write(ack, b"%d\n" % i)
    elif mode == "hold":
        point, wid = int(argv[2]), argv[3]
        w = store.queue_writer("T", 0)
        store.appender.set_fault(point, lib.SHMQ_FA_PAUSE)
        print("holding", flush=True)
        w.put(f"{wid}:0".encode())
        return 3  # not reached: the fault point pauses until killed
    elif mode == "stop":
        point, wid = int(argv[2]), argv[3]
        w = store.queue_writer("T", 0)
        store.appender.set_fault(point, lib.SHMQ_FA_STOP)
        w.put(f"{wid}:0".encode())
        print("done", flush=True)
    elif mode == "batch":
        wid, n, bsize, queues = argv[2], int(argv[3]), int(argv[4]), int(argv[5])
        writers = [store.queue_writer("T", q) for q in range(queues)]
        for b in range(n // bsize):
            entries = [(f"{wid}:{b * bsize + k}".encode(), b"", 0) for k in range(bsize)]
            writers[b % queues].put_batch(encode_batch(entries))
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
