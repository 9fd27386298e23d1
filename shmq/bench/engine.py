"""One run: a scenario through one adapter, in separate producer and consumer processes.

Sequence: the adapter's ``setup`` (parent) -> spawn consumers, then producers (fresh
interpreters, ``spawn`` start method: nothing of the harness's threads or store mappings is
inherited) -> each opens its sender or receiver and says ready on its pipe -> the parent
publishes a start instant ``go`` a little ahead, and everyone starts on it -> the parent
watches progress counters and raises ``stop`` at the end of the window (plus a short grace
for messages in flight) or when every message of a count-mode run has arrived -> children
send their figures (counts, HDR histogram, CPU seconds from psutil), consumers go on
draining (unrecorded) so that no producer stays blocked on a full queue -> ``release`` lets
everyone close (a multiprocessing.Queue producer must not exit while its feeder thread
still holds messages a consumer might want) -> join, kill by pid whatever did not exit ->
``teardown``.

Children ignore SIGINT: Ctrl-C reaches the parent, which stops the run through ``stop`` and
still reports what was measured (status "interrupted").
"""
from __future__ import annotations

import importlib
import multiprocessing as mp
import os
import signal
import time
import traceback
from typing import Callable

from . import histogram
from .loops import Consumer, produce
from .peers.base import Peer
from .scenarios import Result, Scenario
from .services import ServiceUnavailable
from .tail import open_log, write_services

READY_TIMEOUT = 60.0
GRACE_S = 0.3          # after the window: time for messages in flight to arrive
RESULT_TIMEOUT = 15.0
START_AHEAD_S = 0.05


class Interrupted(Exception):
    """Ctrl-C during a run; ``result`` holds what was measured."""

    def __init__(self, result: Result):
        super().__init__("interrupted")
        self.result = result


#: how often a push consumer's main thread looks for the stop (its receiver delivers meanwhile)
PUSH_STOP_POLL_S = 0.05


def _ctx():
    return mp.get_context("spawn")


# ============================================================================ child side ==
def _cpu_seconds() -> float:
    import psutil
    t = psutil.Process().cpu_times()
    return t.user + t.system


def pin_to_cpu(slot: int) -> int | None:
    """``--pin`` (SHMQ_BENCH_PIN=1): this process onto one CPU of those it may use, the slot-th,
    round robin, so a run's producers and consumers get CPUs of their own when there are enough.
    Unpinned, the kernel decides, and under load it put a busy-polling consumer on its
    producer's CPU for most messages (RESULTS, Session 5, busypoll): the consumer then sees a
    message only once the producer sleeps again. Every row of a run is pinned alike. Returns the
    CPU, or None where affinity cannot be set."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
        cpu = cpus[slot % len(cpus)]
        os.sched_setaffinity(0, {cpu})
        return cpu
    except (AttributeError, OSError):
        return None


def child_main(peer_ref: tuple[str, str], role: str, idx: int, channel, sc_dict: dict, shared: dict, conn) -> None:
    """Entry point of a spawned producer or consumer."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sc = Scenario.from_dict(sc_dict)
    go, cgo, stop, release, prog = (shared["go"], shared["cgo"], shared["stop"], shared["release"],
                                     shared["progress"])
    slot = idx if role == "producer" else sc.producers + idx
    if os.environ.get("SHMQ_BENCH_PIN") == "1":
        pin_to_cpu(slot)  # before the endpoint starts its threads, which inherit it
    endpoint = None
    ppid = os.getppid()
    orphan = lambda: os.getppid() != ppid  # noqa: E731  (the harness died: stop, do not linger)
    try:
        cls: type[Peer] = getattr(importlib.import_module(peer_ref[0]), peer_ref[1])
        if role == "producer":
            histogram.set_timer_slack_ns(1000)
            endpoint = cls.open_sender(channel, sc, idx)
        else:
            endpoint = cls.open_receiver(channel, sc, idx)
        # the CPU clock's first read imports psutil (14-29 ms here): not at the start instant,
        # where it made every row's first sends that late (a sync producer near its rate never
        # caught up: bench/RESULTS.md, "Session 8, tcpe2e")
        _cpu_seconds()
        conn.send({"ready": True})
        start = go if role == "producer" else cgo
        while start.value == 0 and not stop.value and not orphan():
            time.sleep(0.001)
        if stop.value or orphan():
            conn.send({"role": role, "idx": idx, "aborted": True})
            return
        start_ns = start.value
        histogram.wait_until(start_ns)
        cpu0 = _cpu_seconds()

        def progress(n: int) -> None:
            prog[slot] = n

        stopped = lambda: bool(stop.value) or orphan()  # noqa: E731
        if role == "producer":
            tail = open_log("producer")
            if tail is not None:
                tail.note_thread()
            out = produce(endpoint.send, getattr(endpoint, "send_batch", None), sc, idx, go.value,
                          stop=stopped, progress=progress, tail=tail)
            if tail is not None:
                tail.dump(cls.name)
            drain = getattr(endpoint, "drain", None)  # async sends: wait for the unanswered ones
            if drain is not None:
                drain()
        else:
            push = hasattr(endpoint, "start")
            cons = Consumer(sc, go.value, progress=progress, threadsafe=push)
            if sc.backlog:
                cons.window_start = start_ns
            if push:
                endpoint.start(cons.handle)
                # the push client's own thread delivers; this one only waits for the stop. Not
                # every 5 ms: its 200 wake-ups a second (~20 ms of CPU in a 2 s window) took the
                # GIL beside the delivering thread in the push rows only (RESULTS, "Session 13,
                # localtail13"); the stop is seen within PUSH_STOP_POLL_S, after the window
                while not stopped():
                    time.sleep(PUSH_STOP_POLL_S)
            else:
                cons.run(endpoint.recv, stopped)
            out = cons.report()
            if cons.tail is not None:
                cons.tail.dump(cls.name)
        out.update(role=role, idx=idx, cpu_s=_cpu_seconds() - cpu0, start_ns=start_ns)
        conn.send(out)
        # Stay open until the parent has every report: a producer's queue may still hold
        # messages (multiprocessing.Queue's feeder thread), and a consumer keeps draining so
        # that no producer stays blocked on a full queue (stopped early: Ctrl-C).
        drain = getattr(endpoint, "recv", None) if role == "consumer" else None
        deadline = time.monotonic() + 60
        while not release.value and time.monotonic() < deadline and not orphan():
            if drain is not None:
                drain(0.01)
            else:
                time.sleep(0.005)
    except BaseException as e:  # report, never hang the parent
        try:
            conn.send({"role": role, "idx": idx, "error": f"{type(e).__name__}: {e}",
                       "traceback": traceback.format_exc()})
        except OSError:
            pass
    finally:
        if endpoint is not None:
            try:
                endpoint.close()
            except Exception:
                pass
        conn.close()


# =========================================================================== parent side ==
class _Child:
    def __init__(self, role: str, idx: int, proc, conn):
        self.role, self.idx, self.proc, self.conn = role, idx, proc, conn
        self.result: dict | None = None

    def poll(self, timeout: float = 0.0) -> dict | None:
        if self.result is None and self.conn.poll(timeout):
            try:
                self.result = self.conn.recv()
            except (EOFError, OSError):
                self.result = {"role": self.role, "idx": self.idx, "error": "exited without a report"}
        return self.result


def _service_cpu(pids: list[int]) -> float:
    import psutil
    total = 0.0
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def run(peer: Peer, sc: Scenario, env, on_progress: Callable[[str], None] | None = None) -> Result:
    """Run ``sc`` through ``peer``; always returns a Result (skipped, error, ok) or raises
    Interrupted carrying the partial one."""
    why = peer.skip_reason(sc, env)
    if why:
        return Result.skipped(peer.name, sc, why)
    tmpdir = env.tmpdir(f"{peer.name}-")
    children: list[_Child] = []
    ctx = _ctx()
    n = sc.producers + sc.consumers
    shared = {"go": ctx.RawValue("q", 0), "cgo": ctx.RawValue("q", 0), "stop": ctx.RawValue("i", 0),
              "release": ctx.RawValue("i", 0), "progress": ctx.RawArray("q", max(n, 1))}
    interrupted = False
    cut_ns = None
    try:
        try:
            channel = peer.setup(sc, env, tmpdir)
        except ServiceUnavailable as e:
            return Result.skipped(peer.name, sc, str(e))
        except Exception as e:
            return Result.skipped(peer.name, sc, f"setup failed: {type(e).__name__}: {e}", status="error")
        ref = (type(peer).__module__, type(peer).__qualname__)
        for role, k in [("consumer", i) for i in range(sc.consumers)] + [("producer", i) for i in range(sc.producers)]:
            rx, tx = ctx.Pipe(duplex=False)
            p = ctx.Process(target=child_main, args=(ref, role, k, channel, sc.to_dict(), shared, tx),
                            name=f"shmq-bench-{peer.name}-{role}{k}", daemon=False)
            p.start()
            env.track_process(p.pid)
            tx.close()
            children.append(_Child(role, k, p, rx))
        err = _wait_ready(children)
        if err:
            return Result.skipped(peer.name, sc, err, status="error")
        pids = peer.service_pids()
        svc0 = _service_cpu(pids)
        try:
            _drive(sc, shared, children, on_progress, peer.name)
        except KeyboardInterrupt:
            interrupted = True
            shared["stop"].value = 1
            cut_ns = time.monotonic_ns()
        _collect(children, RESULT_TIMEOUT)
        svc_cpu = _service_cpu(pids) - svc0
        write_services(peer.name, pids, shared["go"].value)
        res = summarize(peer.name, sc, [c.result for c in children if c.result], svc_cpu if pids else None,
                        cut_ns=cut_ns)
        if interrupted:
            res.status = "interrupted"
            res.note = (res.note + "; " if res.note else "") + "stopped by Ctrl-C"
            raise Interrupted(res)
        return res
    finally:
        shared["stop"].value = 1
        shared["release"].value = 1
        _reap(children)
        for c in children:
            env.untrack_process(c.proc.pid)
        try:
            peer.teardown()
        finally:
            env.remove_tmpdir(tmpdir)


def _wait_ready(children: list[_Child]) -> str | None:
    deadline = time.monotonic() + READY_TIMEOUT + 1.0 * len(children)  # 64 spawns on 2 busy cores take a while
    pending = list(children)
    while pending:
        for c in list(pending):
            if c.conn.poll(0.01):
                try:
                    msg = c.conn.recv()
                except (EOFError, OSError):
                    return f"{c.role} {c.idx} exited while starting (exit code {c.proc.exitcode})"
                if "error" in msg:
                    return f"{c.role} {c.idx}: {msg['error']}"
                pending.remove(c)
            elif not c.proc.is_alive():
                return f"{c.role} {c.idx} exited while starting (exit code {c.proc.exitcode})"
        if time.monotonic() > deadline:
            return f"{len(pending)} processes not ready after {READY_TIMEOUT:.0f} s"
    return None


def _drive(sc: Scenario, shared: dict, children: list[_Child], on_progress, name: str) -> None:
    """Start everyone and decide when to stop."""
    go, cgo, stop, prog = shared["go"], shared["cgo"], shared["stop"], shared["progress"]
    producers = [c for c in children if c.role == "producer"]
    consumers = [c for c in children if c.role == "consumer"]
    t0 = time.monotonic_ns() + int(START_AHEAD_S * 1e9)
    go.value = t0
    if not sc.backlog:
        cgo.value = t0
    end = None if sc.count_mode else t0 + int((sc.warmup + sc.duration + GRACE_S) * 1e9)
    deadline = t0 + int(sc.timeout * 1e9)
    last_shown = 0.0
    while True:
        time.sleep(0.02)
        now = time.monotonic_ns()
        received = sum(prog[sc.producers + i] for i in range(sc.consumers))
        sent = sum(prog[i] for i in range(sc.producers))
        for c in producers:
            c.poll()
        producers_done = all(c.result is not None for c in producers)
        if sc.backlog and cgo.value == 0 and producers_done:
            cgo.value = time.monotonic_ns() + int(START_AHEAD_S * 1e9)
        if on_progress is not None and time.monotonic() - last_shown >= 0.25:
            last_shown = time.monotonic()
            on_progress(f"{name}: {(now - t0) / 1e9:5.1f} s, sent {sent:,}, received {received:,}")
        if any(c.result is not None and "error" in c.result for c in children):
            break
        if any(not c.proc.is_alive() and c.poll() is None for c in children):
            break
        if end is not None and now >= end:
            break
        if sc.count_mode:
            if consumers and producers_done and received >= sc.count * sc.groups:
                break
            if not consumers and producers_done:
                break
            if now >= deadline:
                break
        elif not consumers and producers_done:
            break
    stop.value = 1


def _collect(children: list[_Child], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    for c in children:
        while c.poll(0.05) is None:
            if time.monotonic() > deadline or (not c.proc.is_alive() and c.poll(0.2) is None):
                c.result = c.result or {"role": c.role, "idx": c.idx, "error": "no report (timed out)"}
                break


def _reap(children: list[_Child]) -> None:
    deadline = time.monotonic() + 10
    for c in children:
        c.proc.join(max(0.0, deadline - time.monotonic()))
    for c in children:
        if c.proc.is_alive():
            try:
                os.kill(c.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            c.proc.join(5)
        c.conn.close()


def summarize(name: str, sc: Scenario, reports: list[dict], broker_cpu_s: float | None,
              cut_ns: int | None = None) -> Result:
    """Fold the children's reports into one Result (also used by the tests). ``cut_ns``: when
    the run was stopped early (the measured window ends there)."""
    res = Result(peer=name, scenario=sc)
    errors = [r for r in reports if "error" in r]
    prods = [r for r in reports if r.get("role") == "producer" and "error" not in r and not r.get("aborted")]
    cons = [r for r in reports if r.get("role") == "consumer" and "error" not in r and not r.get("aborted")]
    if errors:
        res.status = "error"
        res.note = "; ".join(f"{r.get('role')} {r.get('idx')}: {r['error']}" for r in errors)[:300]
    if len(prods) < sc.producers or len(cons) < sc.consumers:
        if not errors:
            res.status = "error"
            res.note = "some processes did not report"
        return res
    res.sent = sum(r["sent"] for r in prods)
    res.messages = sum(r["received"] for r in cons)
    res.duplicates = sum(r["duplicates"] for r in cons)
    res.corrupt = sum(r["corrupt"] for r in cons)
    res.undelivered = max(0, res.sent * sc.groups - res.messages + res.duplicates) if cons else 0  # each group: all
    go = min(r["start_ns"] for r in prods)
    if sc.count_mode:
        if cons:
            start = min(r["start_ns"] for r in cons)
            last = max(r["last_ns"] for r in cons)
            res.seconds = max(last - start, 1) / 1e9
            res.msgs_per_s = res.messages / res.seconds
        send_s = max(max(r["end_ns"] for r in prods) - go, 1) / 1e9
        res.send_msgs_per_s = res.sent / send_s
        if not cons:
            res.seconds = send_s
            res.msgs_per_s = res.send_msgs_per_s
    else:
        window = sc.duration
        if cut_ns is not None:
            window = min(window, (cut_ns - go) / 1e9 - sc.warmup)
            if window <= 0.05:
                res.note = "stopped before the measured window"
                return res
        res.seconds = window
        res.send_msgs_per_s = sum(r["sent_window"] for r in prods) / window
        res.msgs_per_s = (sum(r["in_window"] for r in cons) / window) if cons else res.send_msgs_per_s
    res.mb_per_s = res.msgs_per_s * sc.size / 1e6 if res.msgs_per_s is not None else None
    if sc.rate and not sc.count_mode:
        due = int(sc.rate * (sc.warmup + (res.seconds if cut_ns is not None else sc.duration)))
        if res.sent < 0.95 * due:
            res.note = (res.note + "; " if res.note else "") + \
                f"producers behind the rate: {res.sent:,} of {due:,} due sent"
    if sc.records_latency and cons:
        h = histogram.merge([r["histogram"] for r in cons])
        res.latency_us = histogram.summary_us(h)
        res.histogram = histogram.encode(h) if h.get_total_count() else None
    acks = histogram.merge([r.get("ack_histogram", "") for r in prods])
    res.ack_latency_us = histogram.summary_us(acks)
    if sc.rate:
        res.pacing_late_us = histogram.summary_us(histogram.merge([r.get("late_histogram", "") for r in prods]))
    cpu = {}
    if res.sent:
        cpu["producer"] = round(sum(r["cpu_s"] for r in prods) / res.sent * 1e6, 3)
    if res.messages:
        cpu["consumer"] = round(sum(r["cpu_s"] for r in cons) / res.messages * 1e6, 3)
    if broker_cpu_s is not None and res.sent:
        cpu["broker"] = round(broker_cpu_s / res.sent * 1e6, 3)
    res.cpu_us_per_msg = cpu
    if res.corrupt or res.duplicates:
        res.note = (res.note + "; " if res.note else "") + f"{res.corrupt} corrupt, {res.duplicates} duplicate"
    return res
