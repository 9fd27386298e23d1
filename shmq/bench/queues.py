"""The queues curve: send throughput and latency against the number of queues written.

``queues`` (x: queues, 10 per topic: 10,000 queues are 1,000 topics): a broker of its own on a
fresh store per point; the x queues' topics are created (the broker makes their ConsumeQueue
files then, sparse, off the send path); one producer process, local (shared memory) or TCP
(the series), fetches every route and sends one message to a warm-up topic (the attach or the
connection is not the queue's cost), then sends 100 B round-robin over all x queues (each
``send()`` to the next queue of the next topic: every message goes to another queue, the
worst case for the caches). First the first message to every queue (``first`` p50/p99, and
that round's msgs/s), then plain sends for the measured window (msgs/s, p50, p99 per send).
The producer starts 1 s after the topics are created (every broker worker has them in its
table then). No consumer runs (what each queue costs the send path is the figure). Disk: the
blocks every ConsumeQueue file allocates after the run, per queue and against the 20 bytes an
entry stored (``alloc/stored``: 1 would be exact; a page per queue at least).
"""
from __future__ import annotations

import multiprocessing as mp
import os
import shutil
import signal
import time

from .curves import CurveContext, CurveSpec, Point
from .memory import create_topics, disk_used

PER_TOPIC = 10
BODY = b"x" * 100


def layout(queues: int) -> list[tuple[str, int]]:
    per = min(queues, PER_TOPIC)
    full, rest = divmod(queues, per)
    tag = f"{os.getpid()}x{queues}"
    return [(f"Q{tag}t{i}", per) for i in range(full)] + ([(f"Q{tag}t{full}", rest)] if rest else [])


def _pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] * 1e6


def _sender_main(ch: dict, conn) -> None:
    """Child: one producer; the first round over every queue, then ``duration`` s of plain
    sends; reports the figures."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        from shmq import Message, Producer
        p = Producer(f"q-p-{os.getpid()}", namesrv=ch["namesrv"], local=ch["local"]).start()
        topics = ch["topics"]
        p.send(Message(ch["warm"], BODY))
        for t, _ in topics:
            p._publish_info(t)  # routes before the clock: the queue is measured, not the NameServer
        msgs = [Message(t, BODY) for t, n in topics for _ in range(n)]
        clock = time.perf_counter
        first = []
        t0 = clock()
        for m in msgs:
            a = clock()
            p.send(m)
            first.append(clock() - a)
        first_rate = len(msgs) / (clock() - t0)
        lat, sent, warm, end = [], 0, 0, clock() + ch["warmup"]
        while clock() < end:  # warm-up: not recorded
            for m in msgs[:1000]:
                p.send(m)
                warm += 1
        # a pass over at least 1,000 sends: with 1 queue the loop's own cost stays out of the rate
        run = msgs * max(1, 1000 // len(msgs))
        t0 = clock()
        end = t0 + ch["duration"]
        while clock() < end:
            for m in run:
                a = clock()
                p.send(m)
                lat.append(clock() - a)
                if a > end:
                    break
            sent = len(lat)
        total = len(msgs) + warm + sent
        conn.send({"rate": sent / (clock() - t0), "stored": total, "p50": _pct(lat, .5), "p99": _pct(lat, .99),
                   "first_rate": first_rate, "first_p50": _pct(first, .5), "first_p99": _pct(first, .99)})
        p.shutdown()
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})


def measure_queues(ctx: CurveContext, series: str, x) -> Point:
    n = int(x)
    p = Point(series, n, f"{n:,}")
    store = os.path.join(ctx.env.socket_dir(), "store")
    pid, addr = ctx.env.start_broker(store, "ASYNC_FLUSH", "bench-queues")
    mpc = mp.get_context("spawn")
    rx, tx = mpc.Pipe()
    proc = None
    try:
        topics = layout(n)
        warm = f"Qwarm{os.getpid()}x{n}"
        ctx.say(f"queues {series} {n:,}: creating {len(topics):,} topics")
        create_topics(addr, ctx.env.namesrv(), [(warm, 1)] + topics)
        time.sleep(1.0)  # every worker has the topics (else a send asks the supervisor first)
        ch = {"namesrv": ctx.env.namesrv(), "local": "always" if series == "local" else "never",
              "topics": topics, "warm": warm, "duration": ctx.duration, "warmup": ctx.warmup}
        proc = mpc.Process(target=_sender_main, args=(ch, tx), name="shmq-bench-queues-producer")
        proc.start()
        ctx.env.track_process(proc.pid)
        ctx.say(f"queues {series} {n:,}: sending")
        deadline = time.monotonic() + 120 + n * 0.02
        while not rx.poll(0.2):
            if not proc.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the producer gave no report (exit code {proc.exitcode})")
        r = rx.recv()
        if "error" in r:
            raise RuntimeError(r["error"])
        p.msgs_per_s, p.p50_us, p.p99_us = r["rate"], r["p50"], r["p99"]
        p.mb_per_s = r["rate"] * len(BODY) / 1e6
        for k in ("first_rate", "first_p50", "first_p99"):
            p.extra[k] = r[k]
        cq = disk_used(os.path.join(store, "consumequeue"))
        p.extra["cq_kib_per_queue"] = cq / 1024 / (n + 1)
        p.extra["cq_alloc_per_stored"] = cq / (r["stored"] * 20 + 20)
    except Exception as e:
        p.status, p.note = "error", f"{type(e).__name__}: {e}"[:300]
    finally:
        ctx.end_child(proc, rx)
        ctx.env.stop_process(pid, timeout=60)
        shutil.rmtree(os.path.dirname(store), ignore_errors=True)
    return p


CURVES = [
    CurveSpec(
        name="queues", title="send throughput and latency against queues written (10 queues per topic)",
        x_label="queues", points=(1, 10, 100, 1000, 10000), quick=(1, 10), measure=measure_queues,
        series=("local", "tcp"), parse_x=int,
        columns=(("msgs_per_s", "msgs/s"), ("p50_us", "p50 µs"), ("p99_us", "p99 µs"),
                 ("first_rate", "first round msgs/s"), ("first_p50", "first msg p50 µs"),
                 ("first_p99", "first msg p99 µs"), ("cq_kib_per_queue", "CQ disk KiB/queue"),
                 ("cq_alloc_per_stored", "CQ alloc/stored")),
        panels=(("msgs_per_s", "msg/s", True), ("p99_us", "p99 µs", True), ("first_p50", "first message p50 µs", True)),
        explain=__doc__.split("\n\n")[1].replace("\n", " ")),
]
