"""Connection hygiene against hostile clients on a real broker, while a good client is served:
slowloris (many connections each holding a partial frame), a flood of connections from one
peer, a huge length prefix, idle connections, a client that writes requests and never reads
the answers (bytes in flight). The hostile peers use their own loopback
addresses (127.0.0.2-5) so the per-peer cap applies to them and not to the good client.

Bounds asserted are generous (closing happens within seconds, not milliseconds); the good
client's latencies are printed (``-s``) and recorded in bench/RESULTS.md, never asserted."""
from __future__ import annotations

import errno
import socket
import struct
import threading
import time

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.command import encode_command
from shmq.protocol.headers import PullMessageRequestHeader

from .broker_helpers import send, start_broker  # noqa: F401  (fixture)
from .client_helpers import make_topic
from .conftest import namesrv, processes, start_namesrv  # noqa: F401

CAP = 20


def _connect(src: str, addr: str) -> socket.socket | None:
    host, port = addr.split(":")
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(5)
    try:
        s.bind((src, 0))
        s.connect((host, int(port)))
    except OSError:
        s.close()
        return None
    return s


def _closed_by_peer(s: socket.socket, wait: float) -> bool:
    s.settimeout(wait)
    try:
        return s.recv(1) == b""
    except socket.timeout:
        return False
    except OSError as e:
        return e.errno in (errno.ECONNRESET, errno.EPIPE)


def _workers_rss(br) -> int:
    import psutil
    return sum(psutil.Process(pid).memory_info().rss for pid in br.worker_pids())


def _firehose(s: socket.socket, limit: int, seconds: float) -> int:
    """Write pulls (each answered with ~3 MB of messages) for ``seconds``, never reading an
    answer; returns the request bytes the kernel took."""
    h = PullMessageRequestHeader(consumerGroup="hose", topic="HOSE", queueId=0, queueOffset=0, maxMsgNums=32,
                                 sysFlag=0, commitOffset=0, suspendTimeoutMillis=0, subVersion=0)
    frame = encode_command(request(RequestCode.PULL_MESSAGE, h))
    s.setblocking(False)
    sent, deadline = 0, time.monotonic() + seconds
    view = memoryview(frame)
    while sent < limit and time.monotonic() < deadline:
        try:
            n = s.send(view)
        except BlockingIOError:
            time.sleep(0.01)
            continue
        except OSError:
            break
        sent += n
        view = view[n:] or memoryview(frame)
    return sent


class GoodClient(threading.Thread):
    def __init__(self, addr: str):
        super().__init__(daemon=True)
        self.addr, self.stop, self.lat, self.errors = addr, threading.Event(), [], []

    def run(self):
        with SyncRemotingClient(self.addr, timeout=10) as c:
            i = 0
            while not self.stop.is_set():
                t0 = time.perf_counter()
                r = send(c, "HY", b"good-%d" % i)
                self.lat.append(time.perf_counter() - t0)
                if r.code != 0:
                    self.errors.append((r.code, r.remark))
                i += 1
                time.sleep(0.005)


def test_hostile_clients_do_not_starve_a_good_one(namesrv, start_broker):
    br = start_broker(namesrv, workers=2, settings={
        "partialFrameTimeoutMillis": 1000, "serverMaxConnectionsPerPeer": CAP,
        "serverChannelMaxIdleTimeSeconds": 2, "maxFrameSize": 1024 * 1024})
    make_topic(br, "HY", 1)
    make_topic(br, "HOSE", 1)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        for i in range(16):
            assert send(c, "HOSE", b"%03d" % i + b"h" * 200_000).code == 0
    good = GoodClient(br.addr)
    good.start()
    try:
        time.sleep(1.0)  # the good client alone: its baseline
        base = len(good.lat)
        # slowloris: 60 connections (3 peers x 20) each sending 3 bytes of a length word
        slow = [s for src in ("127.0.0.2", "127.0.0.6", "127.0.0.7") for s in
                (_connect(src, br.addr) for _ in range(CAP)) if s is not None]
        for s in slow:
            try:
                s.sendall(b"\x00\x00\x01")
            except OSError:
                pass
        # a flood of 200 connections from one peer: at most CAP per worker stay open
        flood = [s for s in (_connect("127.0.0.3", br.addr) for _ in range(200)) if s is not None]
        # one huge length prefix
        huge = _connect("127.0.0.4", br.addr)
        huge.sendall(struct.pack(">i", 0x7FFFFFF0) + b"\x00" * 12)
        # one idle connection
        idle = _connect("127.0.0.5", br.addr)
        # a firehose: requests written without ever reading an answer; the broker stops reading
        # from it once its answers back up (bytes in flight), so its memory stays bounded
        hose = _connect("127.0.0.8", br.addr)
        rss_before = _workers_rss(br)
        pushed = _firehose(hose, 256 * 1024 * 1024, 3.0)

        assert _closed_by_peer(huge, 10), "a frame beyond maxFrameSize closes at once"
        time.sleep(1.0)
        open_flood = [s for s in flood if not _closed_by_peer(s, 0.01)]
        assert len(open_flood) <= 2 * CAP, f"{len(open_flood)} flood connections kept open"
        deadline = time.monotonic() + 20
        for s in slow:
            assert _closed_by_peer(s, max(0.1, deadline - time.monotonic())), "partial frame never timed out"
        assert _closed_by_peer(idle, 20), "idle connection never closed"
        during = len(good.lat)
        served_during = during - base
        grew = _workers_rss(br) - rss_before
        print(f"\nfirehose: {pushed} request bytes taken, workers grew {grew >> 20} MiB")
        # unthrottled, 3 s of pulls would be ~10^5 requests and ~10^11 bytes of answers
        assert pushed < 64 * 1024 * 1024, f"the broker kept reading a client that never reads ({pushed} bytes)"
        assert grew < 256 * 1024 * 1024, f"workers grew {grew >> 20} MiB for a client that never reads"
        hose.close()
        for s in slow + flood + [huge, idle]:
            s.close()
        # the broker still takes new connections
        again = SyncRemotingClient(br.addr, timeout=5)
        try:
            assert send(again, "HY", b"after").code == 0
        finally:
            again.close()
    finally:
        good.stop.set()
        good.join(15)
    assert not good.errors, good.errors[:3]
    assert served_during > 0, "the good client was served during the attack"
    for label, part in (("alone", good.lat[:base]), ("under attack", good.lat[base:during])):
        lat = sorted(part)
        print(f"\ngood client {label}: {len(lat)} sends, p50 {lat[len(lat) // 2] * 1e3:.2f} ms, "
              f"p99 {lat[int(len(lat) * 0.99)] * 1e3:.2f} ms, max {lat[-1] * 1e3:.2f} ms")
