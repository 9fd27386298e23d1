#!/usr/bin/env python3
"""The Python client's CPU per oneway send over one TCP connection, without a broker: a sink
process reads and discards what the producer writes, so neither the broker's speed nor its CPU
on the same two cores moves the figure much.

    .venv/bin/python bench/tcp_client_sink.py [--n 50000] [--rounds 3]

Rows, alternated ``--rounds`` times in one process against the same sink (100 B bodies):

* **peer: generic oneway**: the send as main had it before session 3: ``_prepare`` +
  RemotingCommand + ``encode_command`` + one ``sendall`` per message on the caller's blocking
  socket (``SyncRemotingClient.invoke_oneway``).
* **send_oneway()**: the producer's oneway as it is (its frame from the queue's template, written
  by the client's loop thread with the rest of the burst).
* **send_async()**: 2,000 in flight; the sink answers each as a broker does (a prepared JSON
  response with the request's opaque), so the client's whole async path is measured: request,
  answer matching, SendResult, Future.
* **peer: generic sync send** and **send()**: one round trip each on the caller's blocking socket,
  the request encoded generically (main before session 3) or from the queue's template.

Each row: this process's CPU (user + system, every thread) per message, and msgs/s into the sink.
The route is set by hand (a NameServer that never answers; nothing else is asked of it).
"""
from __future__ import annotations

import argparse
import collections
import socket
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from shmq import Message, Producer  # noqa: E402
from shmq.client.message import MessageQueue  # noqa: E402
from shmq.client.route import TopicPublishInfo  # noqa: E402

BODY = b"x" * 100
# Reads frames; a oneway one (or another request: a heartbeat) is dropped, a send answered as a
# broker answers it (a prepared JSON response with the request's opaque): the least a server can
# do per request.
SINK = r"""
import re, socket, struct, threading
s = socket.create_server(("127.0.0.1", 0))
print(s.getsockname()[1], flush=True)
OPAQUE = re.compile(rb'"flag":(\d+),"language":"JAVA","opaque":(-?\d+),')
ANSWER = (b'{"code":0,"extFields":{"msgId":"7F00000100002A9F0000000000001234","queueId":"%d",'
          b'"queueOffset":"1234"},"flag":1,"language":"JAVA","opaque":%d,"serializeTypeCurrentRPC":"JSON",'
          b'"version":409}')
QID = re.compile(rb'"e":"(\d+)"')
def serve(c):
    buf = b""
    while data := c.recv(1 << 20):
        buf += data
        out, pos = [], 0
        while len(buf) - pos >= 8:
            total, mark = struct.unpack_from(">ii", buf, pos)
            if len(buf) - pos < 4 + total:
                break
            head = buf[pos + 8:pos + 8 + (mark & 0xFFFFFF)]
            pos += 4 + total
            m = OPAQUE.search(head)
            if m and not int(m.group(1)) & 2 and head[:11] in (b'{"code":310', b'{"code":320'):
                a = ANSWER % (int(QID.search(head).group(1)), int(m.group(2)))
                out.append(struct.pack(">ii", 4 + len(a), len(a)) + a)
        buf = buf[pos:]
        if out:
            c.sendall(b"".join(out))
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def row(name: str, send, n: int, settle) -> None:
    c0, t0 = time.process_time(), time.perf_counter()
    for _ in range(n):
        send()
    settle()
    time.sleep(0.05)  # the loop thread's last writes
    c1, t1 = time.process_time(), time.perf_counter()
    print(f"| {name} | {1e6 * (c1 - c0) / n:.2f} | {n / (t1 - t0 - 0.05):,.0f} |", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=50000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rows", default="generic,oneway,async,generic-sync,sync",
                    help="which rows, of generic,oneway,async,generic-sync,sync")
    a = ap.parse_args()
    sink = subprocess.Popen([sys.executable, "-c", SINK], stdout=subprocess.PIPE, text=True)
    ns = socket.create_server(("127.0.0.1", 0))
    try:
        addr = f"127.0.0.1:{sink.stdout.readline().strip()}"
        p = Producer("tcp-client-sink", namesrv=f"127.0.0.1:{ns.getsockname()[1]}", local="never").start()
        inst = p._inst()
        inst.broker_addrs["sink"] = {0: addr}
        inst.publish["S"] = TopicPublishInfo("S", [MessageQueue("S", "sink", q) for q in range(4)])

        def generic() -> None:
            m = Message("S", BODY)
            body, props, sysflag = p._prepare(m)
            mq = p._select(p._publish_info("S"), None)
            p._sync_conn(addr).invoke_oneway(p._send_request(mq, m, body, props, sysflag, batch=False))

        def oneway() -> None:
            p.send_oneway(Message("S", BODY))

        def generic_sync() -> None:
            m = Message("S", BODY)
            body, props, sysflag = p._prepare(m)
            mq = p._select(p._publish_info("S"), None)
            p._send_result(p._invoke_sync(addr, p._send_request(mq, m, body, props, sysflag, batch=False), 3),
                           mq, props["UNIQ_KEY"])

        def sync() -> None:
            p.send(Message("S", BODY))

        inflight: collections.deque = collections.deque()

        def async_send() -> None:
            if len(inflight) >= 2000:
                inflight.popleft().result(10)
            inflight.append(p.send_async(Message("S", BODY)))
        rows = [(name, f) for key, name, f in (
            ("generic", "peer: generic oneway, a sendall per message", generic), ("oneway", "send_oneway()", oneway),
            ("async", "send_async(), 2,000 in flight, each answered by the sink", async_send),
            ("generic-sync", "peer: generic sync send (RemotingCommand, encode_command), answered", generic_sync),
            ("sync", "send(), answered by the sink", sync))
            if key in a.rows.split(",")]
        for _, f in rows:
            for _ in range(2000):
                f()
        time.sleep(0.2)
        print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; {a.n} messages a row")
        print("| one connection, 100 B, into a sink | client CPU µs/msg | msgs/s |\n|---|---:|---:|")
        for _ in range(a.rounds):
            for name, f in rows:
                row(name, f, a.n, lambda: [inflight.popleft().result(10) for _ in range(len(inflight))])
        p.shutdown()
    finally:
        sink.kill()
        sink.wait()
        ns.close()


if __name__ == "__main__":
    main()
