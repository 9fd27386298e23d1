"""Memory curves: what one more topic-queue, and one more idle TCP connection, costs.

``queue-memory`` (x: queues, 10 per topic: 10,000 queues are 1,000 topics): a broker of its
own on a fresh store and a local producer that has sent one message to a 1-queue topic give
the baseline (RSS and PSS of the broker's processes, supervisor and workers, summed; and of
the producer process); then x queues are created and the producer sends one message to each
(``send_orderly`` to every queue: each one's ConsumeQueue file exists and is mapped, by the
broker and, on the local path, by the producer), and both are measured again. Per queue:
the growth divided by x. PSS splits a page shared by n processes n ways, so the broker's PSS
sum does not count the shared store mapping once per worker as the RSS sum does. The disk
the ConsumeQueue files take (allocated blocks) is reported beside it; a point that would
not fit on the disk at the first queues' rate is skipped with that reason.

``conn-memory`` (x: idle connections): a fresh broker measured, then x TCP connections
opened to it from one child process (connected, nothing sent: what an idle client costs)
and measured again once the broker has accepted them all. Kernel socket buffers are not in
RSS (they are kernel memory) and are not counted.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import time

from .curves import CurveContext, CurveSpec, Point

PER_TOPIC = 10
DISK_MARGIN = 4 << 30   # leave this much of the disk free


def proc_memory(pids: list[int]) -> tuple[float, float]:
    """(RSS, PSS) in MiB, summed over ``pids`` (psutil; PSS from smaps)."""
    import psutil
    rss = pss = 0
    for pid in pids:
        try:
            m = psutil.Process(pid).memory_full_info()
            rss += m.rss
            pss += getattr(m, "pss", m.rss)
        except psutil.Error:
            pass
    return rss / 2**20, pss / 2**20


def broker_pids(pid: int) -> list[int]:
    import psutil
    try:
        return [pid] + [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.Error:
        return [pid]


def disk_used(path: str) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for n in names:
            try:
                total += os.stat(os.path.join(root, n)).st_blocks * 512
            except FileNotFoundError:
                pass
    return total


def _producer_main(ch: dict, conn) -> None:
    """Child: a local producer; one message to the warm-up topic, report, then (on "go") one
    to every queue of ch["topics"], report, wait for "exit"."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from shmq import Message, Producer
        p = Producer(f"mem-p-{os.getpid()}", namesrv=ch["namesrv"], local="always").start()
        p.send(Message(ch["warm"], b"w"))
        conn.send({"memory": proc_memory([os.getpid()])})
        topics = conn.recv()
        pick = lambda mqs, msg, q: mqs[q]  # noqa: E731
        for topic, queues in topics:
            for q in range(queues):
                p.send_orderly(Message(topic, b"q"), pick, q)
        conn.send({"memory": proc_memory([os.getpid()])})
        conn.recv()
        p.shutdown()
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})


def create_topics(broker: str, namesrv: str, topics: list[tuple[str, int]], timeout: float = 120.0) -> None:
    """Create every topic on the broker, then wait once for the NameServer to route the last."""
    from shmq.message.names import PERM_RW, TBW102
    from shmq.protocol import RequestCode, SyncRemotingClient, request
    from shmq.protocol.headers import CreateTopicRequestHeader
    with SyncRemotingClient(broker, timeout=10) as c:
        for topic, n in topics:
            h = CreateTopicRequestHeader(topic=topic, defaultTopic=TBW102, readQueueNums=n, writeQueueNums=n,
                                         perm=PERM_RW, topicFilterType="SINGLE_TAG")
            r = c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h))
            if r.code != 0:
                raise RuntimeError(f"create topic {topic}: code {r.code} {r.remark}")
    deadline = time.monotonic() + timeout
    with SyncRemotingClient(namesrv, timeout=10) as c:
        for topic, _ in (topics[-1], topics[0]):
            while c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)).code != 0:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the NameServer has no route for {topic} after {timeout:.0f} s")
                time.sleep(0.1)


def layout(queues: int) -> list[tuple[str, int]]:
    per = min(queues, PER_TOPIC)
    full, rest = divmod(queues, per)
    tag = f"{os.getpid()}x{queues}"
    return [(f"Mem{tag}t{i}", per) for i in range(full)] + ([(f"Mem{tag}t{full}", rest)] if rest else [])


class _Point:
    """A broker of this point's own on a fresh store; removed after."""

    def __init__(self, ctx: CurveContext):
        self.ctx = ctx
        self.store = os.path.join(ctx.env.socket_dir(), "store")
        self.pid, self.addr = ctx.env.start_broker(self.store, "ASYNC_FLUSH", "bench-memory")

    def memory(self) -> tuple[float, float]:
        time.sleep(0.5)  # let the broker settle (accepts, registration, housekeeping)
        return proc_memory(broker_pids(self.pid))

    def close(self) -> None:
        self.ctx.env.stop_process(self.pid, timeout=60)
        shutil.rmtree(os.path.dirname(self.store), ignore_errors=True)


def _mem_fields(p: Point, who: str, before: tuple, after: tuple, n: int) -> None:
    p.extra[f"{who}_rss_mib"], p.extra[f"{who}_pss_mib"] = round(after[0], 1), round(after[1], 1)
    p.extra[f"{who}_rss_kib_per"] = round((after[0] - before[0]) * 1024 / n, 1)
    p.extra[f"{who}_pss_kib_per"] = round((after[1] - before[1]) * 1024 / n, 1)


def _too_big(pt: _Point, n: int) -> str | None:
    """None, or why ``n`` queues' ConsumeQueue files would not fit on the disk, judged by the
    warm-up queue's file (measured, not assumed: a sparse file takes about nothing)."""
    per = disk_used(os.path.join(pt.store, "consumequeue"))
    st = os.statvfs(pt.store)
    free = st.f_bavail * st.f_frsize - DISK_MARGIN
    if per * n > free:
        return (f"{n:,} ConsumeQueue files at {per / 2**20:.1f} MiB each (allocated now) need "
                f"{per * n / 2**30:.1f} GiB; {max(free, 0) / 2**30:.1f} GiB free beyond a {DISK_MARGIN >> 30} GiB margin")
    return None


def measure_queues(ctx: CurveContext, series: str, x) -> Point:
    n = int(x)
    p = Point(series, n, f"{n:,}")
    pt = _Point(ctx)
    mpc = mp.get_context("spawn")
    rx, tx = mpc.Pipe()
    proc = None
    try:
        warm = f"MemWarm{os.getpid()}x{n}"
        create_topics(pt.addr, ctx.env.namesrv(), [(warm, 1)])
        proc = mpc.Process(target=_producer_main, args=({"namesrv": ctx.env.namesrv(), "warm": warm}, tx),
                           name="shmq-bench-memory-producer")
        proc.start()
        ctx.env.track_process(proc.pid)
        first = _recv(rx, proc)
        b0 = pt.memory()
        why = _too_big(pt, n)
        if why:
            p.status, p.note = "skipped", why
            rx.send([])
            return p
        topics = layout(n)
        ctx.say(f"queue-memory {n:,}: creating {len(topics):,} topics")
        create_topics(pt.addr, ctx.env.namesrv(), topics)
        rx.send(topics)
        second = _recv(rx, proc, timeout=60 + n * 0.05)
        b1 = pt.memory()
        _mem_fields(p, "broker", b0, b1, n)
        _mem_fields(p, "producer", first["memory"], second["memory"], n)
        p.extra["cq_disk_mib"] = round(disk_used(os.path.join(pt.store, "consumequeue")) / 2**20, 1)
        rx.send("exit")
    except Exception as e:
        p.status, p.note = "error", f"{type(e).__name__}: {e}"[:300]
    finally:
        ctx.end_child(proc, rx)
        pt.close()
    return p


def _recv(rx, proc, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while not rx.poll(0.2):
        if not proc.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the producer gave no report (exit code {proc.exitcode})")
    msg = rx.recv()
    if "error" in msg:
        raise RuntimeError(msg["error"])
    return msg


def _connections_main(addr: str, n: int, conn) -> None:
    """Child: ``n`` idle TCP connections to ``addr``, held until told to close."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import socket
    host, port = addr.rsplit(":", 1)
    socks = []
    try:
        for _ in range(n):
            socks.append(socket.create_connection((host, int(port)), timeout=10))
        conn.send({"open": len(socks)})
        conn.recv()
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        for s in socks:
            s.close()


def established(pids: list[int], port: int) -> int:
    """TCP connections the broker's processes have accepted on ``port``."""
    import psutil
    n = 0
    for pid in pids:
        try:
            n += sum(1 for c in psutil.Process(pid).net_connections("tcp")
                     if c.laddr and c.laddr.port == port and c.status == psutil.CONN_ESTABLISHED)
        except psutil.Error:
            pass
    return n


def measure_connections(ctx: CurveContext, series: str, x) -> Point:
    n = int(x)
    p = Point(series, n, f"{n:,}")
    pt = _Point(ctx)
    mpc = mp.get_context("spawn")
    rx, tx = mpc.Pipe()
    proc = None
    try:
        b0 = pt.memory()
        proc = mpc.Process(target=_connections_main, args=(pt.addr, n, tx), name="shmq-bench-connections")
        proc.start()
        ctx.env.track_process(proc.pid)
        _recv(rx, proc, timeout=60 + n * 0.05)
        port, deadline = int(pt.addr.rsplit(":", 1)[1]), time.monotonic() + 30
        while established(broker_pids(pt.pid), port) < n and time.monotonic() < deadline:
            time.sleep(0.2)
        p.extra["accepted"] = established(broker_pids(pt.pid), port)
        b1 = pt.memory()
        _mem_fields(p, "broker", b0, b1, n)
        if p.extra["accepted"] < n:
            p.note = f"the broker accepted {p.extra['accepted']:,} of {n:,} within 30 s"
        rx.send("close")
    except Exception as e:
        p.status, p.note = "error", f"{type(e).__name__}: {e}"[:300]
    finally:
        ctx.end_child(proc, rx)
        pt.close()
    return p


_MEM_COLUMNS = (("broker_rss_mib", "broker RSS MiB"), ("broker_pss_mib", "broker PSS MiB"),
                ("broker_rss_kib_per", "broker RSS KiB per"), ("broker_pss_kib_per", "broker PSS KiB per"))

CURVES = [
    CurveSpec(
        name="queue-memory", title="memory per topic-queue: broker and local producer (10 queues per topic)",
        x_label="queues", points=(1, 100, 1000, 10000), quick=(1, 20), measure=measure_queues, series=("local",),
        parse_x=int,
        columns=_MEM_COLUMNS + (("producer_rss_mib", "producer RSS MiB"), ("producer_pss_kib_per", "producer PSS KiB per"),
                                ("cq_disk_mib", "ConsumeQueue disk MiB")),
        panels=(("broker_pss_mib", "broker PSS MiB", True), ("producer_pss_mib", "producer PSS MiB", True),
                ("cq_disk_mib", "ConsumeQueue disk MiB", True)),
        explain=__doc__.split("\n\n")[1].replace("\n", " ")),
    CurveSpec(
        name="conn-memory", title="broker memory per idle TCP connection", x_label="connections",
        points=(1, 10, 100, 1000), quick=(1, 10), measure=measure_connections, series=("tcp",), parse_x=int,
        columns=_MEM_COLUMNS + (("accepted", "accepted"),),
        panels=(("broker_rss_mib", "broker RSS MiB", False), ("broker_pss_kib_per", "broker PSS KiB per connection", True)),
        explain=__doc__.split("\n\n")[2].replace("\n", " ")),
]
