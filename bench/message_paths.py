"""CPU time of the two message hot paths issue 10 touched, in-process (so a loaded machine
changes the figures less than wall-clock rounds): the consumer's record decode and the broker's
SEND_MESSAGE store step (properties rewrite + append + msgId), plus the raw C append for
reference. Runs against this tree and against the pre-issue-10 layout (store.record,
QueueWriter._meta), so the same file measures before and after.

    .venv/bin/python bench/message_paths.py
"""
from __future__ import annotations

import shutil
import tempfile
import time
import timeit

from shmq.client.message import messages_from_records
from shmq.store import MessageStore
from shmq.store.config import StoreConfig

try:
    from shmq.message.classify import AS_SENT, PLAIN, classify
    from shmq.message.msgid import host_prefix, offset_msg_id_after
    from shmq.message.properties import encode_properties
    from shmq.message.record import encode_record
    from shmq.store.put import PutPipeline
    NEW = True
except ImportError:  # the layout before issue 10
    from shmq.store.record import encode_properties, encode_record
    NEW = False

PROPS = "TAGS\x01TagA\x02KEYS\x01k1\x02UNIQ_KEY\x017F00000100002A9F0000000000000001\x02WAIT\x01true"
BODY = b"x" * 100
BORN = (0x7F000001, 4242)
CLUSTER_PROP = "CLUSTER\x01DefaultCluster"


def best_ns(fn, number: int, repeat: int = 9, per: int = 1) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat, timer=time.process_time)) / (number * per) * 1e9


def decode() -> tuple[float, float]:
    props = encode_properties({"TAGS": "A", "KEYS": "k1", "UNIQ_KEY": "0A0B0C0D0E0F00112233445566778899",
                               "CLUSTER": "DefaultCluster"})
    props = props.encode() if isinstance(props, str) else props
    buf = memoryview(encode_record(topic="BenchTopic", body=BODY, properties=props) * 256)
    return (best_ns(lambda: messages_from_records(buf), 200, 15, 256),
            best_ns(lambda: [m.tags for m in messages_from_records(buf)], 100, 15, 256))


def _send_new(store):
    fw = PutPipeline(store, "DefaultCluster").fast_writer("T", 0)
    prefix = host_prefix(store.store_host)

    def send():
        kind = classify("T", PROPS, 0)
        if kind is not PLAIN and kind not in AS_SENT:
            return None
        fw.put_sent(BODY, PROPS, 0, 0, 1700000000000, *BORN, 0)
        return offset_msg_id_after(prefix, fw.out.phys_offset), str(fw.out.queue_offset)
    return send


def _send_old(store):
    qw = store.queue_writer("T", 0)
    prefix = store._store_ip.hex().upper() + f"{store._store_port & 0xFFFFFFFF:08X}"

    def send():  # the broker's SEND_MESSAGE fast path as it was written at 9b2f665
        props = PROPS
        if "DELAY\x01" in props or "TRAN_MSG\x01" in props or "T".startswith("%RETRY%"):
            return None
        if "WAIT\x01" in props:
            props = "\x02".join(p for p in props.split("\x02") if p and not p.startswith("WAIT\x01"))
        props = (props.rstrip("\x02") + "\x02" + CLUSTER_PROP) if props else CLUSTER_PROP
        m = qw._meta
        m.flag, m.sysflag, m.born_ts = 0, 0, 1700000000000
        m.born_ip, m.born_port = BORN
        m.reconsume_times = 0
        qoff = qw.put(BODY, props.encode())
        return f"{prefix}{qw._out.phys_offset:016X}", str(qoff)
    return send


def store_steps() -> tuple[float, float]:
    root = tempfile.mkdtemp(prefix="shmq-bench-paths")
    store = MessageStore.open(StoreConfig(root=root, mapped_file_size_commitlog=256 << 20,
                                          disk_max_used_space_ratio=100))
    try:
        send = (_send_new if NEW else _send_old)(store)
        send()
        qw = store.queue_writer("R", 0)
        raw = (PROPS.replace("WAIT\x01true", CLUSTER_PROP)).encode()
        return best_ns(send, 20000), best_ns(lambda: qw.put(BODY, raw), 20000)
    finally:
        store.close()
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    d, dt = decode()
    s, r = store_steps()
    print(f"{'after' if NEW else 'before'}: decode {d:.0f} ns/record, decode+tags {dt:.0f} ns/record, "
          f"broker store step {s:.0f} ns/msg, raw put {r:.0f} ns/msg (CPU time, best of 9-15)")


if __name__ == "__main__":
    main()
