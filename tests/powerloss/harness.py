"""One power-loss run: a broker (supervisor and workers) with the durability trace on, under
load from TCP producers, a local producer (local_producer.py, on the shared mapping) and a
committing consumer; SIGKILL of every one of those processes at a random moment (back to
back, as a power cut stops them); then, for each seed, the
store a power cut could have left (image.py) and a broker started on it, checked:

* it starts (recovery never refuses the store);
* acked-lost: SEND_OK answers whose message is not there (SYNC_FLUSH: none at all;
  ASYNC_FLUSH: none answered before the last flush interval and a scheduling slack);
* garbage: a served message whose body checksum fails or a record that does not decode;
* duplicates: an id served twice (the producers never retry);
* the files against what the CommitLog recovered, checked offline after a clean stop: every
  record verifies and every ConsumeQueue entry points at its record (store/verify.py); the
  checkpoint the cut left is not ahead of the recovered end (log_flushed, cq_flushed);
  no consumer offset the broker answers is beyond the queue's max offset.
"""
from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from shmq.errors import StoreCorrupt
from shmq.protocol import SyncRemotingClient
from shmq.store.checkpoint import Checkpoint, path_of
from shmq.store.config import StoreConfig
from shmq.store.verify import verify_store

from tests.integration.broker_helpers import BROKER_READY, TEST_SETTINGS, BrokerProc
from tests.integration.conftest import start_process

from . import load
from .image import power_cut

HERE = Path(__file__).resolve().parent
FLUSH_INTERVAL_MS = 50
#: the flusher may be late on a loaded 2-core machine: how far past one interval an ASYNC_FLUSH
#: ack may still be lost (the figure each run reports is the real age of the oldest loss)
ASYNC_SLACK_S = 0.5
SETTINGS = {**TEST_SETTINGS,
            "mappedFileSizeCommitLog": 1 << 20,        # several files roll in a short run
            "mappedFileSizeConsumeQueue": 20 * 1000,   # so do ConsumeQueue files
            "flushIntervalCommitLog": FLUSH_INTERVAL_MS,
            "flushIntervalConsumeQueue": 200,
            "flushConsumerOffsetInterval": 100}


@dataclass
class Outcome:
    seed: int
    started: bool = False
    acked: int = 0
    local_acked: int = 0
    recovered: int = 0
    acked_lost: list = field(default_factory=list)        # lost beyond the allowed window
    lost_in_window: int = 0                                # ASYNC_FLUSH: within the window
    oldest_loss_s: float = 0.0                             # age at the kill of the oldest lost ack
    garbage: list = field(default_factory=list)
    duplicates: int = 0
    served_lost: int = 0        # delivered to the consumer before the cut, gone after it (reported)
    problems: list = field(default_factory=list)           # files inconsistent with the log
    image: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.started and not (self.acked_lost or self.garbage or self.duplicates or self.problems)


class Runner:
    """Starts brokers for one test; every broker it starts is in ``processes`` (stopped at
    teardown by pid) and its shared-memory segment is removed at ``close``."""

    def __init__(self, processes: list, tmp: Path, mode: str, *, broken: bool = False):
        self.processes, self.tmp, self.mode, self.broken = processes, tmp, mode, broken
        self.stores: list[Path] = []
        self.n = 0

    def start(self, store: Path, trace: Path | None = None, broken: bool = False,
              settings: dict | None = None) -> BrokerProc:
        self.n += 1
        launcher = [str(HERE / "broken_broker.py")] if broken else ["-m", "shmq.cli.broker"]
        argv = [sys.executable, *launcher, "--port", "0", "--store", str(store), "--workers", "2"]
        for k, v in {**SETTINGS, "brokerName": "powerloss", "flushDiskType": self.mode, **(settings or {})}.items():
            argv += ["--set", f"{k}={v}"]
        env = {k: v for k, v in os.environ.items() if k != "SHMQ_DURABILITY_TRACE"}
        if trace is not None:
            env["SHMQ_DURABILITY_TRACE"] = str(trace)
        p = start_process(argv, BROKER_READY, self.tmp / f"broker-{self.n}.log", timeout=60, env=env)
        p.__class__ = BrokerProc
        self.processes.append(p)
        self.stores.append(store)
        return p  # type: ignore[return-value]

    def close(self) -> None:
        import posix_ipc
        from shmq.store.control import segment_name
        for st in self.stores:
            try:
                posix_ipc.unlink_shared_memory(segment_name(str(st)))
            except posix_ipc.ExistentialError:
                pass


def kill_all(p: BrokerProc, local: subprocess.Popen) -> None:
    """SIGKILL the supervisor, its workers (each in its own session) and the local producer
    back to back, as a power cut stops them, then wait for all of them."""
    pids = [p.pid, *p.worker_pids(), local.pid]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.popen.wait(10)
    local.wait(10)
    for pid in pids[1:-1]:
        try:
            psutil.Process(pid).wait(10)
        except psutil.NoSuchProcess:
            pass


def start_local_producer(store: Path, trace: Path, base: int, seed: int, ackfile: Path) -> subprocess.Popen:
    """tests/powerloss/local_producer.py on the broker's store, once it says it is attached."""
    env = dict(os.environ, SHMQ_DURABILITY_TRACE=str(trace))  # it may create ConsumeQueue files
    p = subprocess.Popen([sys.executable, "-m", "tests.powerloss.local_producer", str(store), str(base),
                          str(seed), str(ackfile)], cwd=HERE.parent.parent, env=env, stdout=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, start_new_session=True)
    line = p.stdout.readline()
    p.stdout.close()
    if line.strip() != b"ready":
        p.kill()
        p.wait()
        raise RuntimeError(f"the local producer did not attach to {store} (exit {p.poll()})")
    return p


def _local_acks(ackfile: Path, acks: load.Acks) -> None:
    for line in ackfile.read_text().splitlines():
        mid, at = line.split()
        acks.acked[int(mid)] = float(at)
        acks.local += 1


def load_then_kill(runner: Runner, n: int, rng: random.Random, seconds: float, store: Path | None = None,
                   trace: Path | None = None, phase: int = 0):
    """Run the load on a traced store (a fresh one by default) and kill everything: (live
    store, trace dir, acks, kill time). The kill comes after 0.3-1 x ``seconds`` in phase 0;
    in a later phase (a store just recovered from a cut) as early as 0.05 x, with ConsumeQueues
    flushed every 3 s: the kill lands before the first ConsumeQueue flush after recovery, when
    only the checkpoint recovery wrote says what of them is on disk."""
    store, trace = store or runner.tmp / f"l{n}", trace or runner.tmp / f"t{n}"
    trace.mkdir(exist_ok=True)
    b = runner.start(store, trace, broken=runner.broken,
                     settings={"flushIntervalConsumeQueue": 3000} if phase else None)
    acks = load.Acks()
    base = (n * 10) * 10_000_000 + phase * 5_000_000
    producers = [load.Producer(b.addr, base + i * 10_000_000, acks, rng.randrange(1 << 30)) for i in range(3)]
    consumer = load.Consumer(b.addr)
    ackfile = runner.tmp / f"local-acks-{n}-{phase}"
    local = start_local_producer(store, trace, base + 9 * 10_000_000, rng.randrange(1 << 30), ackfile)
    try:
        for t in (*producers, consumer):
            t.start()
        time.sleep(rng.uniform(0.05 if phase else 0.3, 1.0) * seconds)
        killed_at = time.monotonic()
        kill_all(b, local)
    finally:
        if local.poll() is None:
            local.kill()
            local.wait()
    for t in (*producers, consumer):
        t.stop.set()
        t.join(10)
    _local_acks(ackfile, acks)
    acks.served = consumer.served
    return store, trace, acks, killed_at


def check_cut(runner: Runner, live: Path, trace: Path, acks: load.Acks, killed_at: float, seed: int) -> Outcome:
    out = Outcome(seed)
    if (trace / "INCOMPLETE").exists():  # the trace missed a report: this cut would prove nothing
        out.problems.append(f"durability trace incomplete: {(trace / 'INCOMPLETE').read_text()[:300]}")
        return out
    image = runner.tmp / f"{live.name}c{seed % 10_000}"   # short: broker.sock lives there
    rep = power_cut(str(live), str(trace), str(image), seed)
    out.image = {"pages_live": rep.pages_live, "pages_durable": rep.pages_durable,
                 "vanished": rep.vanished[:8], "reverted": rep.reverted[:8]}
    cut_cp = Checkpoint.load(path_of(str(image)))
    try:
        b = runner.start(image)
    except RuntimeError as e:
        out.problems.append(f"broker did not start on the cut store: {e}")
        return out
    out.started = True
    c = SyncRemotingClient(b.addr, timeout=10)
    try:
        ids, out.garbage, maxes, holes = _read_all(c)
        offsets = [load.consumer_offset(c, q) for q in range(load.QUEUES)]
    finally:
        c.close()
    b.stop(30)
    out.problems += [f"queue {q}: pull at {off} answered {code}, next {nxt}" for q, off, code, nxt in holes]
    for q, (o, hi) in enumerate(zip(offsets, maxes)):
        if o is not None and o > hi:
            out.problems.append(f"queue {q}: consumer offset {o} beyond the max offset {hi}")
    _judge(out, acks, ids, killed_at, runner.mode)
    _check_files(out, image, cut_cp)
    if out.ok:
        shutil.rmtree(image, ignore_errors=True)
    return out


def _read_all(c):
    try:
        return load.read_everything(c)
    except StoreCorrupt as e:
        return [], [f"undecodable record served: {e}".encode()], [0] * load.QUEUES, []


def _judge(out: Outcome, acks: load.Acks, ids: list[int], killed_at: float, mode: str) -> None:
    got = set(ids)
    out.recovered = len(got)
    out.duplicates = len(ids) - len(got)
    out.acked = len(acks.acked)
    out.local_acked = acks.local
    out.served_lost = len(acks.served - got)
    window = FLUSH_INTERVAL_MS / 1000 + ASYNC_SLACK_S
    for mid, at in acks.acked.items():
        if mid in got:
            continue
        age = killed_at - at
        out.oldest_loss_s = max(out.oldest_loss_s, age)
        if mode == "ASYNC_FLUSH" and age <= window:
            out.lost_in_window += 1
        else:
            out.acked_lost.append((mid, round(age, 3)))


def _check_files(out: Outcome, image: Path, cut_cp: Checkpoint) -> None:
    cfg = StoreConfig(root=str(image), mapped_file_size_commitlog=SETTINGS["mappedFileSizeCommitLog"],
                      cq_entries_per_file=SETTINGS["mappedFileSizeConsumeQueue"] // 20)
    v = verify_store(cfg)
    out.problems += v.problems[:10]
    if cut_cp.log_flushed > v.end:
        out.problems.append(f"checkpoint log_flushed {cut_cp.log_flushed} ahead of the recovered end {v.end}")
    if cut_cp.cq_flushed > v.end:
        out.problems.append(f"checkpoint cq_flushed {cut_cp.cq_flushed} ahead of the recovered end {v.end}")


def cut_and_load_again(runner: Runner, n: int, rng: random.Random, seconds: float, live: Path, trace: Path,
                       acks: load.Acks, killed_at: float):
    """A second power loss: cut once, restart a traced broker on the cut store (its recovery's
    own syncs are traced), load it again and kill it. The first run's acknowledgements keep
    their age at its own kill (their times are shifted to the second kill)."""
    image, trace2 = runner.tmp / f"{live.name}d", runner.tmp / f"{trace.name}d"
    power_cut(str(live), str(trace), str(image), rng.randrange(1 << 30), durable_into=str(trace2))
    live2, trace2, acks2, killed2 = load_then_kill(runner, n, rng, seconds, image, trace2, phase=1)
    for mid, at in acks.acked.items():
        acks2.acked[mid] = at - killed_at + killed2
    acks2.local += acks.local
    acks2.served |= acks.served
    return live2, trace2, acks2, killed2


def run(processes, tmp: Path, mode: str, *, crashes: int, cuts: int, seed: int, seconds: float = 1.5,
        broken: bool = False, stop_on_loss: bool = False, twice: bool = False) -> list[Outcome]:
    """``crashes`` loaded runs, each cut ``cuts`` ways (``twice``: after a first cut, a restart
    and more load). Seeded: the load's timing is not, so a seed fixes the cuts' coins, not
    which bytes were in flight."""
    rng = random.Random(seed)
    runner = Runner(processes, tmp, mode, broken=broken)
    outcomes = []
    try:
        for n in range(crashes):
            live, trace, acks, killed_at = load_then_kill(runner, n, rng, seconds)
            if twice:
                live, trace, acks, killed_at = cut_and_load_again(runner, n, rng, seconds, live, trace, acks, killed_at)
            for _ in range(cuts):
                o = check_cut(runner, live, trace, acks, killed_at, rng.randrange(1 << 30))
                outcomes.append(o)
                if stop_on_loss and o.acked_lost:
                    return outcomes
            if all(o.ok for o in outcomes):   # the disk is shared: keep only what explains a failure
                shutil.rmtree(live, ignore_errors=True)
                shutil.rmtree(trace, ignore_errors=True)
    finally:
        runner.close()
    return outcomes


def summary(outcomes: list[Outcome]) -> str:
    bad = [o for o in outcomes if not o.ok]
    return (f"{len(outcomes)} cuts, {sum(o.acked for o in outcomes)} acks checked "
            f"({sum(o.local_acked for o in outcomes)} local), "
            f"{sum(len(o.acked_lost) for o in outcomes)} acked-lost, "
            f"{sum(o.lost_in_window for o in outcomes)} lost within the flush window, "
            f"oldest loss {max((o.oldest_loss_s for o in outcomes), default=0):.3f}s, "
            f"{sum(len(o.garbage) for o in outcomes)} garbage, {sum(o.duplicates for o in outcomes)} duplicates, "
            f"{sum(o.served_lost for o in outcomes)} served then lost, "
            f"{sum(o.image.get('pages_live', 0) for o in outcomes)} pages written back / "
            f"{sum(o.image.get('pages_durable', 0) for o in outcomes)} dropped; "
            f"failing: {[(o.seed, o.acked_lost[:3], o.garbage[:2], o.problems[:3], o.image) for o in bad][:3]}")
