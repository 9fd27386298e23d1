#!/usr/bin/env python3
"""shmq against Apache RocketMQ 4.9.7 on this machine, driven by the same Java benchmark pair.

    .venv/bin/python bench/vs_rocketmq.py [--threads 64] [--sizes 128 1024] [--warmup 5]
        [--measure 15] [--flush ASYNC_FLUSH SYNC_FLUSH] [--rounds 1] [--json FILE]

For each flush mode it starts, on loopback and on fresh temp stores, a shmq NameServer and
broker (``shmq-broker``, its default workers) and an Apache RocketMQ 4.9.7 NameServer and
broker (the Maven Central jars, through ``tests/thirdparty/rocketmq_server.py``: a 256 MiB
heap, RocketMQ's default file sizes), creates the topic on each (8 queues), then for each
body size runs, against one broker after the other, the benchmark pair of
``tests/thirdparty/java/bench/RmqBench.java`` on rocketmq-client 4.9.8: a push consumer, and a
producer of ``--threads`` threads sending synchronously for ``--warmup`` + ``--measure``
seconds. RmqBench re-implements ``org.apache.rocketmq.example.benchmark.Producer`` /
``Consumer`` (``rocketmq-example`` is not served by the registry here, for any version).

One table: send TPS and RT avg / p50 / p99 / max (ms) over the measured window, the
consumer's TPS and born-to-store / store-to-consume averages over the same wall-clock window,
the broker's CPU per message sent (all its processes, over the producer's run), and shmq's
ratios to Apache RocketMQ (TPS: shmq / Apache, above 1 is better; p99: shmq / Apache, below 1
is better). Both brokers stay up through a flush mode's runs (the idle one
costs little); each broker's own processes are stopped by pid at the end.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from shmq.message.names import PERM_RW, TBW102  # noqa: E402
from shmq.protocol import RequestCode, SyncRemotingClient, request  # noqa: E402
from shmq.protocol.headers import CreateTopicRequestHeader  # noqa: E402
from tests.thirdparty import jvm, rocketmq_server as rmq  # noqa: E402
from tests.thirdparty.harnesses import _client_props  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
import psutil  # noqa: E402
import worker_placement  # noqa: E402

#: not "BenchmarkTest" (the tool's default): RocketMQ 4.9 counts that name as a system topic and
#: refuses UPDATE_AND_CREATE_TOPIC for it
TOPIC = "BenchTps"
QUEUES = 8
#: Apache RocketMQ's own defaults for what BROKER_DEFAULTS shrinks for the oracle tests.
APACHE_BENCH_CONF = {"mappedFileSizeCommitLog": 1024 * 1024 * 1024, "mappedFileSizeConsumeQueue": 300_000 * 20,
                     "maxHashSlotNum": 5_000_000, "maxIndexNum": 20_000_000, "flushIntervalCommitLog": 500,
                     "flushConsumerOffsetInterval": 5000}


def bench_cp() -> str:
    cp = jvm.classpath(jvm.ROCKETMQ_CLIENT)
    return f"{jvm.compile_sources([jvm.HERE / 'java' / 'bench' / 'RmqBench.java'], cp)}:{cp}"


class ShmqPair:
    """shmq-namesrv + shmq-broker on a temp store; stopped by pid."""

    name = "shmq"

    def __init__(self, flush: str, workdir: Path, workers: int | None):
        self.procs: list[subprocess.Popen] = []
        self.dir = workdir / f"shmq-{flush}"
        self.dir.mkdir(parents=True)
        ns = self._start([sys.executable, "-m", "shmq.cli.namesrv", "--port", "0", "--log-level", "WARNING"],
                         "namesrv")
        self.namesrv = ns
        argv = [sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(self.dir / "store"),
                "-n", ns, "--log-level", "WARNING", "--set", f"flushDiskType={flush}",
                "--set", "brokerName=shmq-bench", "--set", "diskMaxUsedSpaceRatio=95"]
        if workers:
            argv += ["--workers", str(workers)]
        self.addr = self._start(argv, "broker")

    def _start(self, argv: list[str], kind: str) -> str:
        log = open(self.dir / f"{kind}.log", "wb")
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, cwd=ROOT)
        self.procs.append(p)
        line = p.stdout.readline().decode()
        m = re.search(r"listening on (127\.0\.0\.1:\d+)", line)
        if not m:
            self.stop()
            raise SystemExit(f"shmq {kind} did not start: {line!r}; see {self.dir / (kind + '.log')}")
        threading.Thread(target=p.stdout.read, daemon=True).start()  # keep its stdout drained
        return m.group(1)

    def pids(self) -> list[int]:
        return [self.procs[1].pid]  # the broker supervisor; its workers are its children

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(10)


class ApachePair:
    """Apache RocketMQ 4.9.7 NameServer + broker from the Maven Central jars."""

    name = "Apache RocketMQ 4.9.7"

    def __init__(self, flush: str, workdir: Path):
        self.dir = workdir / f"apache-{flush}"
        self.home = rmq.RocketMQHome(self.dir / "home")
        self.ns = rmq.start_namesrv(self.home)
        self.namesrv = self.ns.addr
        try:
            self.br = rmq.start_broker(self.home, self.ns.addr, self.dir / "store", flushDiskType=flush,
                                       **APACHE_BENCH_CONF)
        except BaseException:
            self.ns.stop()
            raise
        self.addr = self.br.addr

    def pids(self) -> list[int]:
        return [self.br.pid]

    def stop(self) -> None:
        self.br.stop()
        self.ns.stop()


def create_topic(broker_addr: str, namesrv: str) -> None:
    h = CreateTopicRequestHeader(topic=TOPIC, defaultTopic=TBW102, readQueueNums=QUEUES, writeQueueNums=QUEUES,
                                 perm=PERM_RW, topicFilterType="SINGLE_TAG")
    with SyncRemotingClient(broker_addr, timeout=10) as c:
        r = c.invoke(request(RequestCode.UPDATE_AND_CREATE_TOPIC, h))
        if r.code != 0:
            raise SystemExit(f"creating {TOPIC} on {broker_addr}: {r.code} {r.remark}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # until the NameServer routes it (a client asks there first)
        with SyncRemotingClient(namesrv, timeout=5) as c:
            if c.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=TOPIC)).code == 0:
                return
        time.sleep(0.5)
    raise SystemExit(f"{TOPIC} not routed by {namesrv} within 60 s")


def broker_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) of these processes and their children."""
    total = 0.0
    for pid in pids:
        try:
            p = psutil.Process(pid)
            for q in [p, *p.children(recursive=True)]:
                t = q.cpu_times()
                total += t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return total


def worker_cpu(pair) -> dict[int, tuple[float, int]]:
    """(CPU seconds, its main thread's voluntary context switches: the loop's sleeps, so its
    wake-ups) of each shmq broker worker by pid ({} for Apache's broker)."""
    if pair.name != "shmq":
        return {}
    out = {}
    for w in worker_placement.broker_workers(psutil.Process(pair.pids()[0]).children()):
        try:
            t = w.cpu_times()
            out[w.pid] = (t.user + t.system, w.num_ctx_switches().voluntary)
        except psutil.NoSuchProcess:
            pass
    return out


def placed(pair, producer_pid: int, consumer_pid: int) -> dict:
    """{"where": "producer w1, consumer w2"} for shmq (worker numbers by pid order), {} else."""
    if pair.name != "shmq":
        return {}
    try:
        workers = worker_placement.broker_workers(psutil.Process(pair.pids()[0]).children())
        seen = worker_placement.serving(workers, {"producer": psutil.Process(producer_pid),
                                                  "consumer": psutil.Process(consumer_pid)})
    except psutil.NoSuchProcess:
        seen = None
    if seen is None:
        return {"where": "not seen"}
    idx = {pid: i + 1 for i, pid in enumerate(seen["workers"])}
    return {"where": f"producer w{idx[seen['producer']]}, consumer w{idx[seen['consumer']]}",
            "pulls_key": seen["conns"]["consumer"]}


def _lines(p: subprocess.Popen, sink: list[dict], ready: threading.Event | None = None) -> None:
    for raw in p.stdout:
        if raw.startswith(b"{"):
            d = json.loads(raw)
            sink.append(d)
            if ready is not None and d.get("kind") == "consumer_started":
                ready.set()


def run_pair(pair, cp: str, size: int, threads: int, warmup: int, measure: int, tag: str, logs: Path) -> dict:
    props = _client_props(logs)
    cons_lines: list[dict] = []
    ready = threading.Event()
    cons = subprocess.Popen(jvm.java_command("RmqBench", cp, "consumer", pair.namesrv, TOPIC, f"bench_cg_{tag}",
                                             "20", heap="256m", props=props),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(logs / f"{tag}-c.err", "wb"))
    threading.Thread(target=_lines, args=(cons, cons_lines, ready), daemon=True).start()
    try:
        if not ready.wait(90):
            raise SystemExit(f"consumer did not start; see {logs / (tag + '-c.err')}")
        time.sleep(5.0)  # its first rebalance takes the queues (3 s was sometimes too short here)
        cpu0, w_cpu0 = broker_cpu(pair.pids()), worker_cpu(pair)
        prod = subprocess.Popen(jvm.java_command("RmqBench", cp, "producer", pair.namesrv, TOPIC, str(threads),
                                                 str(size), str(warmup), str(measure), heap="256m", props=props),
                                stdout=subprocess.PIPE, stderr=open(logs / f"{tag}-p.err", "wb"),
                                stdin=subprocess.DEVNULL)
        seen: dict = {}
        # where the two connections landed (shmq: which worker), read mid-window
        look = threading.Timer(warmup + measure / 2, lambda: seen.update(placed(pair, prod.pid, cons.pid)))
        look.start()
        try:
            out = prod.communicate(timeout=warmup + measure + 120)[0]
        finally:
            look.cancel()
            if prod.poll() is None:
                prod.kill()
        cpu1, w_cpu1 = broker_cpu(pair.pids()), worker_cpu(pair)
        # the consumer's requests so far (data segments its worker took in: pulls, a few
        # heartbeats and offset commits), against the messages of the whole run below
        pulls = worker_placement.segs_in().get(seen["pulls_key"], 0) if "pulls_key" in seen else 0
        time.sleep(1.5)  # the consumer's line for the window's last second
    finally:
        cons.stdin.close()
        try:
            cons.wait(30)
        except subprocess.TimeoutExpired:
            cons.kill()
            cons.wait(10)
    plines = [json.loads(x) for x in out.splitlines() if x.startswith(b"{")]
    summ = next((d for d in plines if d["kind"] == "summary"), None)
    if summ is None:
        raise SystemExit(f"producer printed no summary (exit {prod.returncode}); see {logs / (tag + '-p.err')}")
    summ["per_second"] = [d for d in plines if d["kind"] == "producer"]
    sent_all = sum(d["tps"] for d in summ["per_second"])
    # the broker's CPU (all its processes) per message over the producer's whole run: what
    # bounds its rate when the 2 cores are shared (the other sessions' load included)
    summ["broker_cpu_us_per_msg"] = (cpu1 - cpu0) / sent_all * 1e6 if sent_all else 0.0
    summ["placement"] = seen.get("where", "")
    summ["msgs_per_pull"] = sent_all / pulls if pulls else 0.0
    per = sorted(w_cpu0.items()) if sent_all else []
    summ["worker_cpu_us_per_msg"] = [(w_cpu1.get(pid, c)[0] - c[0]) / sent_all * 1e6 for pid, c in per]
    summ["worker_wakes_per_msg"] = [(w_cpu1.get(pid, c)[1] - c[1]) / sent_all for pid, c in per]
    summ["consumer"] = consumer_window(cons_lines, summ["start_ms"], summ["end_ms"])
    summ["consumer_per_second"] = [d for d in cons_lines if d.get("kind") == "consumer"]
    return summ


def consumer_window(lines: list[dict], start_ms: int, end_ms: int) -> dict:
    """The consumer over the producer's measured window: the cumulative lines nearest its ends."""
    lines = [d for d in lines if d.get("kind") == "consumer"]
    before = [d for d in lines if d["t_ms"] <= start_ms + 500]
    inside = [d for d in lines if start_ms + 500 < d["t_ms"] <= end_ms + 500]
    if not before or not inside:
        return {}
    a, b = before[-1], inside[-1]
    n = b["n"] - a["n"]
    secs = (b["t_ms"] - a["t_ms"]) / 1000.0
    avg = (lambda k: (b[k] - a[k]) / n if n else 0.0)
    return {"tps": n / secs if secs > 0 else 0.0, "received": n, "b2s_avg_ms": avg("b2s_sum"),
            "s2c_avg_ms": avg("s2c_sum"), "b2c_avg_ms": avg("b2c_sum"),
            "b2c_max_ms": max(d["b2c_max_ms"] for d in inside)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--sizes", type=int, nargs="+", default=[128, 1024])
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--measure", type=int, default=15)
    ap.add_argument("--flush", nargs="+", default=["ASYNC_FLUSH", "SYNC_FLUSH"])
    ap.add_argument("--rounds", type=int, default=1, help="repeat each pair; the table gives medians")
    ap.add_argument("--workers", type=int, default=None, help="shmq broker workers (default: the broker's)")
    ap.add_argument("--systems", nargs="+", choices=["shmq", "apache"], default=["shmq", "apache"],
                    help="run only these (exploration: a ratio needs both in the same run)")
    ap.add_argument("--json", metavar="FILE")
    ap.add_argument("--keep", action="store_true", help="keep the temp directory (logs, stores)")
    a = ap.parse_args()
    try:
        cp = bench_cp()
        rmq.server_classpath()
    except jvm.Unavailable as e:
        raise SystemExit(f"cannot run: {e}")
    work = Path(tempfile.mkdtemp(prefix="shmq-vs-rmq-"))
    logs = work / "client-logs"
    logs.mkdir()
    load0 = os.getloadavg()[0]
    t_start = time.time()
    print(f"# {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime())}; nproc {os.cpu_count()}; "
          f"{a.threads} sender threads; warm-up {a.warmup} s, measured {a.measure} s; load average {load0:.2f}; "
          f"disk use {_disk_use(work):.0f} %", flush=True)
    results: list[dict] = []
    try:
        for flush in a.flush:
            pairs = []
            try:
                if "shmq" in a.systems:
                    pairs.append(ShmqPair(flush, work, a.workers))
                if "apache" in a.systems:
                    pairs.append(ApachePair(flush, work))
                for pair in pairs:
                    create_topic(pair.addr, pair.namesrv)
                for size in a.sizes:
                    for rnd in range(a.rounds):
                        for pair in (pairs if rnd % 2 == 0 else pairs[::-1]):
                            tag = f"{'shmq' if pair.name == 'shmq' else 'apache'}-{flush}-{size}-{rnd}"
                            r = run_pair(pair, cp, size, a.threads, a.warmup, a.measure, tag, logs)
                            r.update(system=pair.name, flush=flush, round=rnd)
                            results.append(r)
                            c = r["consumer"]
                            print(f"# {pair.name} {flush} {size} B round {rnd}: send {r['tps']:,.0f}/s p99 "
                                  f"{r['p99_ms']} ms; consumed {c.get('tps', 0):,.0f}/s; broker CPU "
                                  f"{r['broker_cpu_us_per_msg']:.1f} µs/msg"
                                  + (f" (workers {' / '.join(f'{x:.1f}' for x in r['worker_cpu_us_per_msg'])}, "
                                     f"loop wake-ups a msg {' / '.join(f'{x:.2f}' for x in r['worker_wakes_per_msg'])}; "
                                     f"{r['placement']}; {r['msgs_per_pull']:.1f} msgs a consumer segment)"
                                     if r.get("placement") else ""), flush=True)
                            if r.get("failed"):
                                print(f"#   {r['failed']:,} sends failed, the first: {r.get('first_error')}",
                                      flush=True)
            finally:
                for pair in pairs:
                    pair.stop()
    finally:
        if a.json:
            Path(a.json).write_text(json.dumps(results, indent=1))
        if a.keep:
            print(f"# kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    print(f"# {time.time() - t_start:.0f} s; load average after {os.getloadavg()[0]:.2f}; disk use "
          f"{_disk_use(Path(tempfile.gettempdir())):.0f} %")
    print_table(results, a)


def _disk_use(path: Path) -> float:
    """As df counts it (used / (used + available to us)): Apache's disk-full guard
    (diskSpaceWarningLevelRatio, 0.90) marks its store unwritable above 90 %."""
    st = os.statvfs(path)
    used = (st.f_blocks - st.f_bfree) * st.f_frsize
    return 100.0 * used / max(1, used + st.f_bavail * st.f_frsize)


def _median(rows: list[dict], key, sub: str | None = None) -> float:
    vals = [(r[sub] if sub else r).get(key, 0.0) for r in rows]
    return statistics.median(vals) if vals else 0.0


def _ratios(ours: list[dict], peer: list[dict]) -> str:
    """TPS and p99 shmq / Apache; none when either side had failed sends (a broker that refused
    them, e.g. Apache's disk-full guard above 90 % disk use, is not a peer row)."""
    failed = sum(r["failed"] for r in ours + peer)
    if failed or not _median(peer, "tps") or not _median(peer, "p99_ms"):
        return f"n/a ({failed:,} failed sends) | n/a"
    return (f"{_median(ours, 'tps') / _median(peer, 'tps'):.2f} | "
            f"{_median(ours, 'p99_ms') / _median(peer, 'p99_ms'):.2f}")


def print_table(results: list[dict], a) -> None:
    print("| flush | body | system | send TPS | RT avg ms | RT p50 ms | RT p99 ms | RT max ms | failed | "
          "consume TPS | B2S avg ms | S2C avg ms | broker CPU µs/msg | TPS shmq/Apache | p99 shmq/Apache |")
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for flush in a.flush:
        for size in a.sizes:
            by = {}
            for system in ("shmq", "Apache RocketMQ 4.9.7"):
                rows = [r for r in results if r["flush"] == flush and r["size"] == size and r["system"] == system]
                if rows:
                    by[system] = rows
            for system, rows in by.items():
                tps, p99 = _median(rows, "tps"), _median(rows, "p99_ms")
                ratio = " | "
                if system == "shmq" and "Apache RocketMQ 4.9.7" in by:
                    ratio = _ratios(rows, by["Apache RocketMQ 4.9.7"])
                print(f"| {flush} | {size} B | {system} | {tps:,.0f} | {_median(rows, 'avg_ms'):.2f} | "
                      f"{_median(rows, 'p50_ms'):.2f} | {p99:.2f} | {_median(rows, 'max_ms'):.1f} | "
                      f"{sum(r['failed'] for r in rows)} | {_median(rows, 'tps', 'consumer'):,.0f} | "
                      f"{_median(rows, 'b2s_avg_ms', 'consumer'):.2f} | {_median(rows, 's2c_avg_ms', 'consumer'):.2f} | "
                      f"{_median(rows, 'broker_cpu_us_per_msg'):.1f} | "
                      f"{ratio} |")


if __name__ == "__main__":
    main()
