"""The catch-up curve: a consumer group that starts behind a backlog of ``x`` bytes (10 GiB
on the recording machine) and reads all of it, from the page cache and after the backlog's
files were dropped from it, over the local path (the PushConsumer's record walk of the
mapped CommitLog) and over TCP (PULL_MESSAGE to the broker).

One point: a broker of its own on a fresh store (under ``--dir``: on disk, not tmpfs) ->
one local producer writes the backlog (send_batch, --size bodies, default 4 KiB, over 4
queues) -> a fresh consumer process reads it all, local, then TCP (page cache: whatever
stayed after the write) -> the broker stops (it unmaps the files), the store's files are
fsynced and fadvised out (pagecache.py: only our files, no root), the broker restarts on
the same store and the files are fadvised again (recovery reads the newest ones) -> local
read, and the same again for TCP -> the peer: the broker stops, the files are dropped and read
with plain read() (the disk's rate for one reader), then read again (the page cache's). Each
read reports what share of the CommitLog was in the
page cache just before it (mincore). The store is removed after the point.

GB/s is body bytes delivered to the listener per second, from the first message to the last
(the consumer's start and first rebalance are not in it: seconds, and not a read).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import time

from . import pagecache
from .curve_defs import fmt_bytes, parse_bytes
from .curves import CurveContext, CurveSpec, Point

QUEUES = 4
TIMEOUT_S = 1800.0
DEFAULT_SIZE = 4096


def _batch_of(size: int) -> int:
    return max(1, min(64, (1 << 20) // size))  # at most ~1 MiB per send_batch call


def _write_main(ch: dict, conn) -> None:
    """Child: write ``count`` messages of ``size`` bytes through the local path."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from shmq import Message, Producer
        p = Producer(f"backlog-w-{os.getpid()}", namesrv=ch["namesrv"], local="always")
        p.start()
        body, topic, n, b = b"x" * ch["size"], ch["topic"], ch["count"], _batch_of(ch["size"])
        t0 = time.monotonic()
        sent = 0
        while sent < n:
            k = min(b, n - sent)
            p.send_batch([Message(topic, body) for _ in range(k)])
            sent += k
        conn.send({"sent": sent, "seconds": time.monotonic() - t0})
        p.shutdown()
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})


def _read_main(ch: dict, transport: str, conn) -> None:
    """Child: a fresh consumer group from the first offset; counts bodies until the backlog
    is all in, then reports the first-to-last message time and its own CPU."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        import threading

        import psutil

        from shmq import ConsumeResult, PushConsumer
        want, got, nbytes, first, last = ch["count"], [0], [0], [0], [0]
        done = threading.Event()

        def listener(msgs):
            now = time.monotonic_ns()
            first[0] = first[0] or now
            got[0] += len(msgs)
            nbytes[0] += sum(len(m.body) for m in msgs)
            last[0] = now
            if got[0] >= want:
                done.set()
            return ConsumeResult.SUCCESS

        local = transport == "local"
        c = PushConsumer(f"backlog-r-{transport}-{os.getpid()}-{time.monotonic_ns()}", namesrv=ch["namesrv"],
                         local="always" if local else "never", consume_from="FIRST_OFFSET", consume_batch_size=32,
                         consume_threads=0 if local else 20, rebalance_interval=1.0)
        c.subscribe(ch["topic"], "*")
        c.on_message(listener)
        cpu0 = sum(psutil.Process().cpu_times()[:2])
        c.start()
        finished = done.wait(TIMEOUT_S)
        cpu = sum(psutil.Process().cpu_times()[:2]) - cpu0
        c.shutdown()
        conn.send({"messages": got[0], "bytes": nbytes[0], "seconds": max(last[0] - first[0], 1) / 1e9,
                   "cpu_s": cpu, "complete": finished})
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})


def _child(ctx: CurveContext, target, args: tuple, what: str) -> dict:
    mpc = mp.get_context("spawn")
    rx, tx = mpc.Pipe(duplex=False)
    proc = mpc.Process(target=target, args=args + (tx,), name=f"shmq-bench-backlog-{what}")
    proc.start()
    ctx.env.track_process(proc.pid)
    tx.close()
    try:
        deadline = time.monotonic() + TIMEOUT_S + 60
        while not rx.poll(0.5):
            if not proc.is_alive() or time.monotonic() > deadline:
                return {"error": f"the {what} process exited without a report (exit code {proc.exitcode})"}
        return rx.recv()
    finally:
        ctx.end_child(proc, rx, grace=30)


class _Broker:
    """This point's broker: started, stopped (unmapping the store) and restarted on one store."""

    def __init__(self, ctx: CurveContext, store: str):
        self.ctx, self.store, self.pid = ctx, store, None

    def start(self) -> None:
        self.pid, self.addr = self.ctx.env.start_broker(self.store, "ASYNC_FLUSH", "bench-backlog")

    def stop(self) -> None:
        if self.pid is not None:
            self.ctx.env.stop_process(self.pid, timeout=120)  # SIGTERM: it flushes and unmaps
            self.pid = None

    def files(self) -> list[str]:
        return pagecache.files_under(os.path.join(self.store, "commitlog"), os.path.join(self.store, "consumequeue"))

    def data_end(self) -> int:
        """The CommitLog's end (asked once: the backlog does not change after the write)."""
        if getattr(self, "_end", None) is None:
            self._end = self._ask_end()
        return self._end

    def _ask_end(self) -> int:
        from shmq.client.admin import Admin
        admin = Admin(self.ctx.env.namesrv())
        try:
            return int(admin.runtime_info(self.addr)["commitLogMaxOffset"])
        finally:
            admin.close()

    def cached_share(self) -> float:
        """Share of the CommitLog's written bytes in the page cache (not the preallocated
        tail, which the broker pre-touches ahead of the writer)."""
        end, res = self.data_end(), 0
        for path in pagecache.files_under(os.path.join(self.store, "commitlog")):
            start = int(os.path.basename(path))
            if start < end:
                res += pagecache.resident_bytes(path, end - start)
        return res / end if end else 0.0


def _read_point(ctx, broker: _Broker, ch: dict, transport: str, cache: str, x) -> Point:
    share = broker.cached_share()
    ctx.say(f"backlog {fmt_bytes(x)}: {transport} read, {cache} ({share:.0%} cached)")
    r = _child(ctx, _read_main, (ch, transport), f"{transport}-reader")
    p = Point(f"{transport}, {cache}", x, fmt_bytes(x))
    p.extra["cached_before_pct"] = round(100 * share, 1)
    if "error" in r:
        p.status, p.note = "error", r["error"]
        return p
    p.msgs_per_s = r["messages"] / r["seconds"]
    p.mb_per_s = r["bytes"] / r["seconds"] / 1e6
    p.extra["gb_per_s"] = p.mb_per_s / 1000
    p.extra["consumer_cpu_us_per_msg"] = round(r["cpu_s"] / max(r["messages"], 1) * 1e6, 2)
    if not r["complete"] or r["messages"] < ch["count"]:
        p.status, p.note = "error", f"read {r['messages']:,} of {ch['count']:,} before the timeout"
    return p


def _raw_point(ctx, broker: _Broker, cache: str, x, count: int) -> Point:
    """The peer: the CommitLog's bytes read with plain read() into one buffer (no decode, no
    process hand-off): what the disk or the page cache gives one reader."""
    share, end = broker.cached_share(), broker.data_end()
    ctx.say(f"backlog {fmt_bytes(x)}: read() of the files, {cache} ({share:.0%} cached)")
    buf, total = bytearray(1 << 20), 0
    t0 = time.monotonic()
    for path in pagecache.files_under(os.path.join(broker.store, "commitlog")):
        left = end - int(os.path.basename(path))
        if left <= 0:
            continue
        with open(path, "rb", buffering=0) as f:
            while left > 0:
                n = f.readinto(buf)
                if not n:
                    break
                total, left = total + min(n, left), left - n
    secs = time.monotonic() - t0
    p = Point(f"read() of the files, {cache}", x, fmt_bytes(x), msgs_per_s=count / secs, mb_per_s=total / secs / 1e6)
    p.extra.update(gb_per_s=p.mb_per_s / 1000, cached_before_pct=round(100 * share, 1))
    p.note = "the peer: the CommitLog read with read() in 1 MiB chunks, records and all"
    return p


def _drop(ctx, broker: _Broker) -> None:
    broker.stop()
    pagecache.drop(broker.files())
    broker.start()
    pagecache.drop(broker.files())  # what recovery read back in, where no longer mapped


def measure(ctx: CurveContext, series: str, x) -> list[Point]:
    from .peers.shmq_client import create_topic
    size = int(ctx.opts.get("size") or DEFAULT_SIZE)
    store = os.path.join(ctx.env.socket_dir(), "store")
    broker = _Broker(ctx, store)
    try:
        broker.start()
        topic = f"Backlog{os.getpid()}x{int(x)}"
        create_topic(broker.addr, ctx.env.namesrv(), topic, QUEUES)
        ch = {"namesrv": ctx.env.namesrv(), "topic": topic, "size": size, "count": max(1, int(x) // size)}
        ctx.say(f"backlog {fmt_bytes(x)}: writing {ch['count']:,} x {size} B")
        w = _child(ctx, _write_main, (ch,), "writer")
        if "error" in w:
            return [Point("write", x, fmt_bytes(x), status="error", note=w["error"])]
        out = [_read_point(ctx, broker, ch, t, "page cache", x) for t in ("local", "tcp")]
        for t in ("local", "tcp"):
            _drop(ctx, broker)
            out.append(_read_point(ctx, broker, ch, t, "dropped", x))
        broker.stop()  # nothing maps the files now: the peer reads them dropped, then cached
        pagecache.drop(broker.files())
        out += [_raw_point(ctx, broker, c, x, ch["count"]) for c in ("dropped", "page cache")]
        out[0].note = (f"written at {w['sent'] * size / w['seconds'] / 1e6:,.0f} MB/s ({size} B bodies, "
                       f"send_batch of {_batch_of(size)})")
        return out
    finally:
        broker.stop()
        shutil.rmtree(os.path.dirname(store), ignore_errors=True)


CURVES = [
    CurveSpec(
        name="backlog", title="catch-up read of a backlog, local record walk and TCP pull, page cache vs dropped",
        x_label="backlog", points=(1 << 30, 10 << 30), quick=(8 << 20, 16 << 20), measure=measure,
        series=("all",), fmt_x=fmt_bytes, parse_x=parse_bytes,
        columns=(("gb_per_s", "GB/s"), ("msgs_per_s", "msgs/s"), ("cached_before_pct", "cached before %"),
                 ("consumer_cpu_us_per_msg", "consumer CPU µs/msg")),
        panels=(("gb_per_s", "GB/s (body bytes)", True), ("msgs_per_s", "msg/s", True)),
        explain=__doc__.split("\n\n", 1)[1].strip().replace("\n", " ")),
]
