#!/usr/bin/env python3
"""CPU per TCP send on each side, in one process, without the network: what one Python client
thread and one single-threaded broker worker can do at most, beside the floor of any Python
server that only reads, frames and answers the same requests.

    .venv/bin/python bench/tcp_send_cpu.py [--n 20000]

Rows (100 B bodies; each the minimum over 7 repeats of this thread's CPU time, so a busy
machine moves it little):

* **client**: what ``Producer`` does per message before the socket: ``_prepare`` + the
  SEND_MESSAGE_V2 request + its frame (``send_async`` / ``send_oneway``: the queue's template,
  client.remote_send; beside it the generic RemotingCommand + encode_command), and for a batch of 32
  the 32 ``Message()`` + the C-encoded body + request + frame, per message.
* **worker**: ``Connection.data_received`` of the worker's transport with the real send
  processor (``broker/worker/processors/send.py``) appending to a real store (ASYNC_FLUSH, a temp
  dir): 64 pipelined SEND_MESSAGE_V2 per read (answered, or oneway) and 4 SEND_BATCH_MESSAGE of
  32 per read, the Python client's own request bytes.
* **floor**: the same reads through ``FrameDecoder`` + ``decode_command`` + the encoding of one
  prepared answer per request: the least a Python worker of this protocol pays per request,
  with no dispatch, checks or append.

1 / (CPU per message) is the most one such thread moves per second; system calls and the
loopback's kernel work come on top (``bench/tcp_paths.py`` measures the paths end to end).
"""
from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import timeit
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shmq.broker.shared.config import BrokerConfig  # noqa: E402
from shmq.broker.worker.processors import send as send_processor  # noqa: E402
from shmq.client.message import Message, MessageQueue  # noqa: E402
from shmq.client.producer import Producer  # noqa: E402
from shmq.protocol.bodies import TopicConfig  # noqa: E402
from shmq.protocol.codes import FLAG_ONEWAY  # noqa: E402
from shmq.protocol.command import decode_command, encode_command  # noqa: E402
from shmq.protocol.frame import FrameDecoder  # noqa: E402
from shmq.protocol.transport import Connection, Limits  # noqa: E402
from shmq.store import MessageStore, StoreConfig  # noqa: E402
from shmq.store.put import PutPipeline  # noqa: E402

BODY = b"x" * 100
MQ = MessageQueue("T", "b", 1)


def cpu_us(fn, n: int) -> float:
    """This thread's CPU per call, in µs: the least of 7 repeats of ``n`` calls."""
    fn()
    return min(timeit.repeat(fn, number=n, repeat=7, timer=time.thread_time)) / n * 1e6


def requests(p: Producer) -> dict[str, bytes]:
    body, props, sysflag = p._prepare(Message("T", BODY))
    sync = p._send_request(MQ, Message("T", BODY), body, props, sysflag, batch=False)
    oneway = p._send_request(MQ, Message("T", BODY), body, props, sysflag, batch=False)
    oneway.flag |= FLAG_ONEWAY
    batch_body, _ = p._batch_body([Message("T", BODY) for _ in range(32)])
    batch = p._send_request(MQ, Message("T", b"-"), batch_body, {}, 0, batch=True)
    for i, c in enumerate((sync, oneway, batch)):
        c.opaque = i + 1
    return {"sync": encode_command(sync), "oneway": encode_command(oneway), "batch": encode_command(batch)}


def client_rows(p: Producer, n: int) -> list[tuple[str, float]]:
    def one_generic():
        m = Message("T", BODY)
        body, props, sysflag = p._prepare(m)
        encode_command(p._send_request(MQ, m, body, props, sysflag, batch=False))

    def one():
        m = Message("T", BODY)
        body, text, sysflag, _ = p._wire(m)
        p._remote(MQ, m.flag, body, text, sysflag, batch=False, oneway=False).frame(7)

    def batch_generic():
        body, _ = p._batch_body([Message("T", BODY) for _ in range(32)])
        encode_command(p._send_request(MQ, Message("T", b"-"), body, {}, 0, batch=True))

    def batch():
        body, _ = p._batch_body([Message("T", BODY) for _ in range(32)])
        p._remote(MQ, 0, body, "", 0, batch=True, oneway=False).frame(7)
    return [("client: one send, generic encoder (prepare, RemotingCommand, encode_command)", cpu_us(one_generic, n)),
            ("client: one send (_wire, RemoteSend, frame from the queue's template)", cpu_us(one, n)),
            ("client: batch of 32, generic encoder (32 Message(), C body, RemotingCommand, encode_command), "
             "per message", cpu_us(batch_generic, n // 32) / 32),
            ("client: batch of 32 (32 Message(), C body, request, template frame), per message",
             cpu_us(batch, n // 32) / 32)]


class _Transport:
    """Takes the worker's writes and throws them away."""
    def write(self, data) -> None: pass
    def is_closing(self) -> bool: return False
    def get_extra_info(self, key): return ("127.0.0.1", 40000)
    def pause_reading(self) -> None: pass
    def resume_reading(self) -> None: pass


def worker_rows(frames: dict[str, bytes], root: Path, n: int) -> list[tuple[str, float]]:
    store = MessageStore.open(StoreConfig(root=str(root), disk_max_used_space_ratio=100))
    try:
        w = types.SimpleNamespace(cfg=BrokerConfig(), store=store, pipeline=PutPipeline(store, "DefaultCluster"),
                                  holds=types.SimpleNamespace(appended=lambda: None), stats={"put": 0}, ctl=None,
                                  topics={"T": TopicConfig(topicName="T", readQueueNums=4, writeQueueNums=4)})

        async def run() -> list[tuple[str, float]]:
            conn = Connection(send_processor.Processor(w).handlers(), Limits())
            conn.connection_made(_Transport())
            rows = []
            for name, key, per_read, msgs in (("SEND_MESSAGE_V2, answered", "sync", 64, 1),
                                              ("SEND_MESSAGE_V2, oneway", "oneway", 64, 1),
                                              ("SEND_BATCH_MESSAGE of 32, per message", "batch", 4, 32)):
                chunk = frames[key] * per_read
                us = cpu_us(lambda: conn.data_received(chunk), max(1, n // per_read // msgs))
                rows.append((f"worker: {name}", us / per_read / msgs))
            return rows
        return asyncio.run(run())
    finally:
        store.close()


def floor_rows(frames: dict[str, bytes], n: int) -> list[tuple[str, float]]:
    answer = decode_command(frames["sync"][4:]).make_response(0, None, {
        "msgId": "7F00000100002A9F0000000000001234", "queueId": "1", "queueOffset": "1234",
        "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"})
    rows = []
    for name, key, per_read, msgs in (("SEND_MESSAGE_V2", "sync", 64, 1),
                                      ("SEND_BATCH_MESSAGE of 32, per message", "batch", 4, 32)):
        chunk = frames[key] * per_read
        dec = FrameDecoder()

        def serve():
            out = []
            for f in dec.feed(chunk):
                answer.opaque = decode_command(f).opaque
                out.append(encode_command(answer))
            return b"".join(out)
        rows.append((f"floor: frame + decode + a prepared answer, {name}",
                     cpu_us(serve, max(1, n // per_read // msgs)) / per_read / msgs))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000, help="messages per repeat")
    a = ap.parse_args()
    p = Producer("tcp-send-cpu", local="never")  # never started: only its encoding is used
    frames = requests(p)
    root = Path(tempfile.mkdtemp(prefix="shmq-tcp-send-cpu-"))
    try:
        rows = client_rows(p, a.n) + worker_rows(frames, root, a.n) + floor_rows(frames, a.n)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; thread CPU, min of 7 x {a.n} messages")
    print("| what (100 B) | CPU µs per message | at most, msgs/s per thread |")
    print("|---|---:|---:|")
    for name, us in rows:
        print(f"| {name} | {us:.2f} | {1e6 / us:,.0f} |")


if __name__ == "__main__":
    main()
