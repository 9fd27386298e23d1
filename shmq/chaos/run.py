"""One chaos run in one flush mode: servers up, producers and consumers at work, then
cycles of "wait a moment, kill -9 one target, wait until it serves again" until the cycle
or time budget is spent (the budget never cuts the first round, one kill of each target);
then producers stop, the broker gets one clean restart, consumers drain, the topic is read
back from offset 0 and the store verified, and :mod:`check` gives the verdict.

Targets (the first cycles take each enabled target once, in a shuffled order, so even a short
run kills every kind; then each cycle picks one at random, weighted; all from a seeded generator):
``producer`` (a local or TCP producer process; a new one takes its slot), ``worker`` (one
broker worker; the supervisor restarts it), ``supervisor`` (the supervisor alone),
``broker`` (supervisor and workers at once), ``slave`` (with ``slaves``: a slave broker).
The recovery time of a broker-side kill runs from the kill to the broker serving again
(:meth:`Cluster.serving`); a producer kill has none (nothing on the broker side stops).
"""
from __future__ import annotations

import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field

from shmq.bench.services import Env, ServiceUnavailable
from shmq.protocol.wire import pull_all
from shmq.store.config import StoreConfig
from shmq.store.verify import verify_store

from . import check
from .cluster import Cluster, Node
from .ledger import read_lines

TOPIC = "ChaosTopic"
QUEUES = 4
TARGETS = ("producer", "worker", "supervisor", "broker", "slave")
DEFAULT_MIX = {"producer": 3, "worker": 3, "supervisor": 1, "broker": 1, "slave": 1}


@dataclass
class Options:
    cycles: int = 20
    seconds: float = 60.0
    slaves: int = 0
    master_role: str = "SYNC_MASTER"
    workers: int = 2
    seed: int = 0
    mix: dict = field(default_factory=lambda: dict(DEFAULT_MIX))
    tcp_producers: int = 1
    local_producers: int = 1
    rate: float = 100.0
    pause: tuple = (0.05, 0.3)
    drain_timeout: float = 60.0
    keep: bool = False
    progress: int = 0          # a progress line on stderr every this many cycles (0: none)


class Actors:
    """The producer and consumer processes, each in a slot; a killed one is replaced by a new
    incarnation (a new id prefix, a new ack file)."""

    def __init__(self, env: Env, namesrv: str, root: str):
        self.env, self.namesrv, self.root = env, namesrv, root
        self.producers: dict[str, object] = {}   # slot -> Popen
        self.consumers: dict[str, object] = {}
        self.incarnation: dict[str, int] = {}
        self.crashes = 0
        for d in ("acks", "recv-tcp", "recv-local"):
            os.makedirs(os.path.join(root, d), exist_ok=True)

    def _spawn(self, slot: str, role: str, local: str, extra: list[str]):
        inc = self.incarnation[slot] = self.incarnation.get(slot, -1) + 1
        name = f"{slot}.{inc}"
        if role == "produce":
            f = os.path.join(self.root, "acks", f"{name}.log")
            extra = extra + ["--name", name]
        else:
            f = os.path.join(self.root, f"recv-{'local' if local == 'always' else 'tcp'}", f"{name}.log")
        argv = [sys.executable, "-m", "shmq.chaos.actors", role, "--namesrv", self.namesrv,
                "--topic", TOPIC, "--local", local, "--file", f, *extra]
        popen, _ = self.env.spawn(argv, r"^ready$", f"{name}.log", timeout=60)
        return popen

    def start(self, opts: Options) -> None:
        for slot, local in (("ctcp", "never"), ("clocal", "always")):
            self.consumers[slot] = self._spawn(slot, "consume", local, ["--group", f"chaos-{slot}"])
        for i in range(opts.tcp_producers):
            self.producers[f"T{i}"] = self._spawn(f"T{i}", "produce", "never", ["--rate", str(opts.rate)])
        for i in range(opts.local_producers):
            self.producers[f"L{i}"] = self._spawn(f"L{i}", "produce", "always", ["--rate", str(opts.rate)])
        self._rates = str(opts.rate)

    def replace_crashed(self) -> None:
        """A producer or consumer that exited on its own is a failure of the client: count
        it and start another in its slot."""
        for table, role in ((self.producers, "produce"), (self.consumers, "consume")):
            for slot, p in list(table.items()):
                if p.poll() is not None:
                    self.crashes += 1
                    self.env.untrack_process(p.pid)
                    local = "always" if slot.startswith(("L", "cl")) else "never"
                    extra = ["--rate", self._rates] if role == "produce" else ["--group", f"chaos-{slot}"]
                    table[slot] = self._spawn(slot, role, local, extra)

    def kill_producer(self, rng: random.Random) -> str:
        slot = rng.choice(sorted(self.producers))
        p = self.producers[slot]
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        self.env.untrack_process(p.pid)
        local = "always" if slot.startswith("L") else "never"
        self.producers[slot] = self._spawn(slot, "produce", local, ["--rate", self._rates])
        return slot

    def stop(self, table: dict) -> None:
        for p in table.values():
            self.env.stop_process(p.pid, timeout=20)
        table.clear()

    def acked(self) -> list[str]:
        return read_lines(os.path.join(self.root, "acks"))

    def received(self) -> dict[str, list[str]]:
        return {g: read_lines(os.path.join(self.root, f"recv-{g}")) for g in ("tcp", "local")}


def run_mode(flush: str, opts: Options) -> dict:
    """One run under ``flush`` (ASYNC_FLUSH or SYNC_FLUSH): the report of :func:`check.report`
    plus the run's settings and how long each phase took (``phase_seconds``)."""
    rng = random.Random(f"{opts.seed}:{flush}")
    clock = _Phases()
    with Env(workers=opts.workers, keep=opts.keep) as env:
        cluster = Cluster(env, flush, workers=opts.workers, slaves=opts.slaves, master_role=opts.master_role)
        cluster.start(TOPIC, QUEUES)
        actors = Actors(env, cluster.namesrv, env.tmpdir("actors-"))
        actors.start(opts)
        _wait(lambda: len(actors.acked()) > 0, 30.0)
        clock.lap("start")
        cycles = _cycles(cluster, actors, opts, rng)
        clock.lap("cycles")
        actors.stop(actors.producers)
        actors.replace_crashed()
        cluster.stop_node(cluster.master)          # the final clean restart ...
        cluster.start_node(cluster.master)
        final = cluster.serving(cluster.master, 60.0)
        clock.lap("restart")
        want = set(actors.acked())                 # ... then the consumers drain
        _wait(lambda: all(want <= set(v) for v in actors.received().values()), opts.drain_timeout)
        clock.lap("catch_up")
        actors.stop(actors.consumers)
        clock.lap("consumers_stop")
        drained = pull_all(cluster.master.addr, TOPIC, QUEUES, group="chaos-drain")
        slave_drained = {n.name: pull_all(n.addr, TOPIC, QUEUES, group="chaos-drain") for n in cluster.slaves}
        for n in reversed(cluster.nodes):
            cluster.stop_node(n)
        problems = _verify(cluster.master)
        clock.lap("drain")
        rep = check.report(actors.acked(), drained, actors.received(), cycles)
        rep.update(flush=flush, seed=opts.seed, slaves=opts.slaves, workers=opts.workers,
                   master_role=opts.master_role if opts.slaves else "ASYNC_MASTER",
                   restarted_serving=final, client_crashes=actors.crashes,
                   store_problems=problems[:10], store_verified=not problems, phase_seconds=clock.laps)
        for name, bodies in slave_drained.items():
            rep.setdefault("slaves_missing", {})[name] = check.missing(want, bodies)
    return rep


class _Phases:
    def __init__(self):
        self.t = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name] = round(now - self.t, 1)
        self.t = now


def _cycles(cluster: Cluster, actors: Actors, opts: Options, rng: random.Random) -> list[dict]:
    mix = {t: w for t, w in opts.mix.items() if w > 0 and (t != "slave" or cluster.slaves)}
    targets, weights = list(mix), list(mix.values())
    first = rng.sample(targets, len(targets))   # every target once (shuffled), then by weight
    deadline = time.monotonic() + opts.seconds
    cycles: list[dict] = []
    # the time budget ends the weighted cycles, not the first round: on a loaded machine a
    # round of restarts can outlast it, and a run that never killed a target proves nothing of it
    while len(cycles) < opts.cycles and (first or time.monotonic() < deadline):
        time.sleep(rng.uniform(*opts.pause))
        actors.replace_crashed()
        target = first.pop() if first else rng.choices(targets, weights)[0]
        cycles.append(_one(cluster, actors, target, rng))
        if opts.progress and len(cycles) % opts.progress == 0:
            print(f"shmq chaos: {len(cycles)} cycles, {len(actors.acked())} acked", file=sys.stderr, flush=True)
    return cycles


def _one(cluster: Cluster, actors: Actors, target: str, rng: random.Random) -> dict:
    """Kill ``target`` and wait until it serves again; the cycle's record."""
    rec: dict = {"target": target}
    if target == "producer":
        rec["slot"] = actors.kill_producer(rng)
        return rec
    node: Node = rng.choice(cluster.slaves) if target == "slave" else cluster.master
    t0 = time.monotonic()
    if target == "worker":
        cluster.kill_worker(node, rng.choice)
    elif target == "supervisor":
        rec["stragglers"] = cluster.kill_supervisor(node)
        _restart(cluster, node, rec)
    else:
        cluster.kill_broker(node)
        _restart(cluster, node, rec)
    rec["served"] = cluster.serving(node, 60.0)
    rec["recovery_ms"] = round((time.monotonic() - t0) * 1000, 1)
    return rec


def _restart(cluster: Cluster, node: Node, rec: dict) -> None:
    """Start ``node`` again; a start that fails is recorded (the cycle counts as not served)
    and tried once more, so one slow start does not end a long run without its report."""
    try:
        cluster.start_node(node)
    except ServiceUnavailable as e:
        rec["start_failed"] = str(e)[:300]
        time.sleep(2.0)
        cluster.start_node(node)


def _verify(n: Node) -> list[str]:
    size = int(n.settings["mappedFileSizeCommitLog"])
    rep = verify_store(StoreConfig(root=n.store, mapped_file_size_commitlog=size), None, check_queues=True)
    return list(rep.problems)


def _wait(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.2)
    return False
