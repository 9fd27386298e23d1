"""``tcp-limit``: the machine's own limit for shmq's TCP rows, through the same harness loops
(the same pacing, the same clock, the same consumer timing): one sync TCP round trip per send
between Python processes, and a raw "puller" taking every echoed frame as a consumer's held
pull does. No broker, no store, no protocol: what a sync send and a pull cycle cost here
before any broker work (the paced form of bench/tcp_paths.py's "blocking echo, and a raw
puller" row).

The server (``python -m shmq.bench.peers.tcp_limit``, started by ``setup``, stopped by pid) is
one blocking Python process: each connection says first whether it is a producer (``P``) or a
consumer (``C``). A producer's bytes are echoed back at once (the sync answer) and queued for
the consumers; a consumer's bytes are a pull: answered at once with everything queued, or held
until the next producer bytes arrive (RocketMQ's long polling, without its bookkeeping).

Frame (producer -> server -> consumer; little-endian; padded so that one 100 B message makes
a 200-byte frame, about a SEND_MESSAGE_V2 request and its answer):

    offset 0  u32  frame length (all of it, this field and the padding included)
    offset 4  u32  n, messages in the frame
    offset 8  n x (u32 body length, body)
    ...       zero padding up to MIN_FRAME
"""
from __future__ import annotations

import select
import socket
import struct
import sys

from .base import FuncReceiver, FuncSender, ServerPeer

FRAME_HEAD = struct.Struct("<II")  # frame length, message count (offsets 0, 4)
BODY_LEN = struct.Struct("<I")     # before each body
MIN_FRAME = 200                    # one 100 B message: a 200-byte frame each way
PULL = b"p" * MIN_FRAME            # a pull request (its bytes are not read)
PRODUCER, CONSUMER = b"P", b"C"
#: bytes one recv may return: below glibc's mmap threshold, so that the bytes object of each
#: read is not mapped and unmapped (three system calls per read, as RESULTS "Session 5,
#: syncflush" found for a recv of 256 KiB); a longer answer arrives over several reads
RECV = 65536


def encode(bodies: list[bytes]) -> bytes:
    parts = [BODY_LEN.pack(len(b)) + b for b in bodies]
    size = FRAME_HEAD.size + sum(map(len, parts))
    pad = max(0, MIN_FRAME - size)
    return FRAME_HEAD.pack(size + pad, len(bodies)) + b"".join(parts) + bytes(pad)


def decode(buf: bytearray) -> list[bytes]:
    """The bodies of every whole frame at the start of ``buf``, removed from it."""
    out: list[bytes] = []
    at = 0
    while len(buf) - at >= FRAME_HEAD.size:
        size, n = FRAME_HEAD.unpack_from(buf, at)
        if len(buf) - at < size:
            break
        p = at + FRAME_HEAD.size
        for _ in range(n):
            (blen,) = BODY_LEN.unpack_from(buf, p)
            out.append(bytes(buf[p + 4:p + 4 + blen]))
            p += 4 + blen
        at += size
    del buf[:at]
    return out


class TcpLimitPeer(ServerPeer):
    name = "tcp-limit"
    description = ("limit: one sync TCP round trip per send to a blocking Python echo server, which hands "
                   "every echoed frame to a raw puller's held pull (no broker work)")

    def skip_reason(self, sc, env):
        if sc.kind not in ("e2e", "produce"):
            return "a sync round-trip limit (e2e and produce only)"
        if sc.send_mode != "sync":
            return "the limit of sync sends (--send-mode sync)"
        return super().skip_reason(sc, env)

    def setup(self, sc, env, tmpdir):
        self._env = env
        p, m = env.spawn([sys.executable, "-m", "shmq.bench.peers.tcp_limit"], r"listening on 127\.0\.0\.1:(\d+)",
                         "tcp-limit.log", timeout=30)
        self._pid = p.pid
        return {"port": int(m.group(1))}

    @classmethod
    def open_sender(cls, ch, sc, idx):
        s = _connect(ch["port"], PRODUCER)
        recv_into, sendall = s.recv_into, s.sendall
        buf = memoryview(bytearray(RECV))

        def round_trip(frame: bytes) -> None:  # the sync answer: the echo of the whole frame
            sendall(frame)
            got, need = 0, len(frame)
            while got < need:
                n = recv_into(buf)
                if not n:
                    raise ConnectionError("tcp-limit server closed the connection")
                got += n

        return FuncSender(lambda body: round_trip(encode([body])), lambda bodies: round_trip(encode(bodies)),
                          s.close)

    @classmethod
    def open_receiver(cls, ch, sc, idx):
        s = _connect(ch["port"], CONSUMER)
        s.sendall(PULL)  # the first pull: held until a frame comes
        pending = bytearray()

        def recv(timeout: float) -> list[bytes]:
            if not select.select([s], [], [], timeout)[0]:
                return []
            data = s.recv(RECV)
            if not data:
                raise ConnectionError("tcp-limit server closed the connection")
            s.sendall(PULL)  # the next pull goes as soon as an answer is read, as a push consumer's does
            pending.extend(data)
            return decode(pending)

        return FuncReceiver(recv, s.close)


def _connect(port: int, role: bytes) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(role)
    return s


def _whole_frames(buf: bytearray) -> int:
    """How many bytes at the start of ``buf`` are whole frames."""
    at = 0
    while len(buf) - at >= FRAME_HEAD.size:
        size = FRAME_HEAD.unpack_from(buf, at)[0]
        if len(buf) - at < size:
            break
        at += size
    return at


def serve() -> None:
    """The server loop (module docstring), until SIGTERM."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)
    print(f"listening on 127.0.0.1:{srv.getsockname()[1]}", flush=True)
    roles: dict[socket.socket, bytes | None] = {}
    held: list[socket.socket] = []  # consumers whose pull waits
    queued: list[bytes] = []
    partial: dict[socket.socket, bytearray] = {}  # a producer's bytes past its last whole frame
    while True:
        ready, _, _ = select.select([srv, *roles], [], [])
        for c in ready:
            if c is srv:
                conn, _ = srv.accept()
                conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                roles[conn] = None
                continue
            data = c.recv(RECV)
            if not data:
                roles.pop(c, None)
                partial.pop(c, None)
                if c in held:
                    held.remove(c)
                c.close()
                continue
            if roles[c] is None:
                roles[c], data = data[:1], data[1:]
            if not data:  # the role byte alone
                continue
            if roles[c] == PRODUCER:
                c.sendall(data)  # the sync answer first, as a broker answers a send
                part = partial.setdefault(c, bytearray())
                part.extend(data)
                whole = _whole_frames(part)  # several producers: no frame is handed over in pieces
                if whole:
                    queued.append(bytes(part[:whole]))
                    del part[:whole]
            elif c not in held:  # a pull (any bytes); one held pull per consumer
                held.append(c)
        while held and queued:  # hand what is queued to the longest-waiting held pull
            held.pop(0).sendall(b"".join(queued))
            queued.clear()


if __name__ == "__main__":
    serve()
