"""The broker supervisor: owns the store and the per-broker tables, runs N workers.

Start-up order (each step's invariant is what the next relies on):

1. Reserve the ports: bind listenPort and listenPort - 2 with SO_REUSEPORT but never listen
   (a bound, non-listening socket gets no connections). With listenPort 0 a free pair is
   picked. The reservation lives as long as the supervisor, so a restarted worker always
   gets the same ports back and nobody else can take them in between.
2. Open the store as its owner (flock, fence, recover, flush/index/cleanup threads). Only
   then may workers attach.
3. Load topics.json, add the default topics, serve the control channel on a unix socket.
4. Spawn the workers (``python -m shmq.broker.worker.main``); each says HELLO, attaches, listens
   on both ports, says READY. The broker is "up" when all are ready.
5. Register with the NameServers; start housekeeping (client expiry scan, offset persist,
   worker monitor), each an AsyncService (shmq.service).

A worker that exits while the broker runs is restarted (after ``workerRestartDelayMillis``,
doubling while it keeps dying young); its client channels are dropped at once when its
control connection closes, so its consumers' groups are told to rebalance.

Shutdown (SIGTERM/SIGINT or :meth:`stop`): unregister from the NameServers, SIGTERM the
workers and wait for them (they finish in-flight requests), then persist offsets and close
the store (flush, checkpoint, remove ``abort``).
"""
from __future__ import annotations

import asyncio
import errno
import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

from shmq.broker.shared.topics import TopicTable, config_path, default_topics
from shmq.message.names import PERM_RW
from shmq.protocol import encode_command
from shmq.protocol.bodies import TopicConfig
from shmq.store import MessageStore, segment_gc
from shmq.store.delay_levels import DelayLevels
from shmq.store.put import PutPipeline
from shmq.store.queue_files import QueueFilePreparer
from shmq.service import AsyncService

from shmq.broker.shared import attach
from shmq.broker.shared import control_channel as cc, placement
from shmq.broker.shared.acl import PlainAcl, acl_file_path
from shmq.broker.shared.config import BrokerConfig

from .control_plane import ControlPlane
from .metrics import exporter as metrics
from .register import Registrar
from .replication import Replication
from .schedule import ScheduleService
from .pop_service import PopService
from .timer_service import TimerService
from .transaction_service import TransactionCheckService

log = logging.getLogger("shmq.broker")

#: How often the supervisor looks for workers that exited (and schedules their restart) where
#: a worker's exit cannot be watched (no pidfd_open: Linux < 5.3).
WORKER_CHECK_S = 0.1
#: With a pidfd per worker on the event loop an exit runs the check at once; the periodic look
#: is then only a backstop (10 wake-ups of the loop a second before, ~1-2 ms of its CPU a second).
WORKER_BACKSTOP_S = 1.0


def _reserve(host: str, port: int) -> socket.socket:
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    try:
        s.bind((host, port))
    except OSError:
        s.close()
        raise
    return s


def reserve_ports(host: str, port: int) -> tuple[int, list[socket.socket]]:
    """Bind ``port`` and ``port - 2`` (or a free such pair when ``port`` is 0)."""
    if port:
        main = _reserve(host, port)
        try:
            vip = _reserve(host, port - 2)
        except OSError:
            main.close()
            raise
        return port, [main, vip]
    for _ in range(200):
        main = _reserve(host, 0)
        p = main.getsockname()[1]
        if p < 1026:
            main.close()
            continue
        try:
            vip = _reserve(host, p - 2)
        except OSError:
            main.close()
            continue
        return p, [main, vip]
    raise OSError("no free port pair (p, p - 2) found")


class WorkerProc:
    def __init__(self, wid: int):
        self.wid = wid
        self.popen: subprocess.Popen | None = None
        self.pidfd: int | None = None  # readable once popen's process has exited (Supervisor._watch)
        self.started = 0.0
        self.restarts = 0
        self.backoff = 0.0


class Supervisor:
    def __init__(self, cfg: BrokerConfig):
        self.cfg = cfg
        self.store: MessageStore | None = None
        self.topics = TopicTable(config_path(cfg.store_root))
        self.registrar: Registrar | None = None
        self.plane: ControlPlane | None = None
        self.pipeline: PutPipeline | None = None
        self.schedule: ScheduleService | None = None
        self.timer: TimerService | None = None
        self.pop: PopService | None = None
        self.tx_check: TransactionCheckService | None = None
        self.metrics: metrics.BrokerMetrics | None = None
        self.replication: Replication | None = None
        self.cq_files: QueueFilePreparer | None = None
        self.workers = [WorkerProc(i + 1) for i in range(cfg.worker_count)]
        # one eventfd per worker, kept across its restarts and passed to every worker: an append
        # by one wakes another's held pulls itself (broker/worker/pull_hold.py, layout.h
        # pull_armed); SHMQ_PULL_PEERS=0: through each worker's pull-wake thread only
        self.pull_wake_fds = ({w.wid: os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC) for w in self.workers}
                              if os.environ.get("SHMQ_PULL_PEERS") != "0" and cfg.worker_count > 1 else {})
        # the connection placement's loads and inboxes (broker/shared/placement.py), kept across
        # worker restarts like the eventfds; SHMQ_HANDOVER=0: the kernel's placement alone
        self.placement = (placement.create([w.wid for w in self.workers])
                          if os.environ.get("SHMQ_HANDOVER") != "0" and cfg.worker_count > 1 else None)
        self._reserved: list[socket.socket] = []
        self._ctl_server: asyncio.AbstractServer | None = None
        self._housekeeping: list[AsyncService] = []
        self._monitor: AsyncService | None = None
        self._stopping = False
        self._persist_lock = threading.Lock()
        self._offsets_held_back = False  # consumerOffset.json held back by a full disk (said once)
        self.stopped = asyncio.Event()

    @property
    def address(self) -> str:
        return f"{self.cfg.listenAddress}:{self.cfg.listenPort}"

    # ================================================================ start ==
    async def start(self, ready_timeout: float = 30.0) -> None:
        cfg = self.cfg
        if cfg.aclEnable:  # a missing or broken ACL file refuses the start, before any port or file
            cfg.aclFile = acl_file_path(cfg.aclFile)
            log.info("ACL on: %d accounts in %s", len(PlainAcl(cfg.aclFile).table.accounts), cfg.aclFile)
        port, self._reserved = reserve_ports(cfg.listenAddress, cfg.listenPort)
        cfg.listenPort = port
        levels = DelayLevels.parse(cfg.messageDelayLevel)
        self.store = MessageStore.open(cfg.store_config(), tag_code=levels.tag_code)
        try:
            # The consumer-offset slot table is walked only by the offsets' persist, the first
            # time 5 s after the start: that first walk faults in the table's pages (~7-13 ms of
            # CPU, then ~0.2 ms a walk), which landed inside the first benchmark row's window
            # of a fresh broker (RESULTS, "Session 13, localtail13"). Once here, before serving.
            self.store.offset_table()
            scfg = self.store.cfg
            attach.write_key(cfg.store_root, scfg.file_mode, scfg.group)  # before any worker reads it
            # segments of deleted stores whose broker was killed: nothing else ever removes them
            if cfg.segmentGcOnStart:
                threading.Thread(target=segment_gc.collect, kwargs={"existing": False},
                                 name="segment-gc", daemon=True).start()
            self.topics.load()
            self.topics.put_many([t for t in default_topics(cfg.brokerClusterName, cfg.brokerName,
                                                            cfg.autoCreateTopicEnable, cfg.defaultTopicQueueNums)
                                  if t.topicName not in self.topics])
            self.registrar = Registrar(cfg, self.topics, on_result=self._on_register_result)
            # every queue's first ConsumeQueue file, made when its topic is (not by its first send)
            self.cq_files = QueueFilePreparer(self.store.cfg, self._queue_counts)
            self.cq_files.start()
            self.plane = ControlPlane(cfg, self.topics, self._topics_changed)
            self.replication = Replication(cfg, self.store, self.topics, self.plane.adopt_topics)
            self.replication.start()
            # POP state is the supervisor's: every worker asks here (pop_service)
            self.pop = PopService(cfg, self.store, self.topics, lambda: self.pipeline)
            handlers = {**self.plane.handlers(), **self.pop.handlers()}
            if metrics.enabled(cfg):
                self.metrics = metrics.BrokerMetrics(cfg, self.store, self.topics, self.plane.clients)
                handlers[cc.Ctl.METRICS] = self.metrics.feeds.on_push
            self._ctl_server = await cc.serve(cfg.control_path, handlers,
                                              self.plane.on_connect, self.plane.on_close)
            # Delayed messages come due in the supervisor, which owns the store.
            loop = asyncio.get_running_loop()
            self.pipeline = cfg.put_pipeline(self.store, lambda t, n: loop.call_soon_threadsafe(
                self.plane.ensure_topic, TopicConfig(topicName=t, readQueueNums=n, writeQueueNums=n, perm=PERM_RW)))
            if not cfg.is_slave:  # a slave re-puts nothing: its master delivers and checks
                self._start_master_services(loop, levels)
            for w in self.workers:
                self._spawn(w)
            await self._wait_ready(ready_timeout)
        except BaseException:
            await self._abort_start()
            raise
        if self.metrics is not None:
            self.metrics.start()
        await self.registrar.start()
        self._housekeeping = [
            AsyncService("shmq-client-scan", cfg.clientScanInterval / 1000.0, self.plane.scan_clients, log=log),
            AsyncService("shmq-offset-persist", cfg.flushConsumerOffsetInterval / 1000.0, self._persist_offsets,
                         log=log),
            AsyncService("shmq-worker-monitor", WORKER_BACKSTOP_S if hasattr(os, "pidfd_open") else WORKER_CHECK_S,
                         self._check_workers, log=log)]
        self._monitor = self._housekeeping[-1]
        for svc in self._housekeeping:
            svc.start()
        log.info("broker %s (%s) up on %s with %d worker(s), store %s", cfg.brokerName, cfg.brokerClusterName,
                 self.address, len(self.workers), cfg.store_root)

    def _topics_changed(self) -> None:
        self.registrar.trigger()
        self.cq_files.wake()

    def _queue_counts(self) -> list[tuple[str, int]]:
        return [(t.topicName, max(t.readQueueNums, t.writeQueueNums)) for t in list(self.topics.table.values())]

    def _start_master_services(self, loop, levels) -> None:
        self.schedule = ScheduleService(self.store, self.pipeline, levels)
        self.schedule.start()
        # RocketMQ 5's timer messages come due here too (timer_service).
        self.timer = TimerService(self.store, self.pipeline)
        self.timer.start()
        self.pop.start()  # revives POP messages not acked in time
        # Half messages are checked back with one live producer of their group, on its
        # own connection, whichever worker holds it.
        self.tx_check = TransactionCheckService(
            self.store, self.pipeline,
            lambda group, cmd: self.plane.forward_threadsafe(loop, group, encode_command(cmd)[4:]) > 0,
            interval_ms=self.cfg.transactionCheckInterval, timeout_ms=self.cfg.transactionTimeOut,
            max_checks=self.cfg.transactionCheckMax)
        self.tx_check.start()

    def _on_register_result(self, ha_server_addr, master_addr) -> None:
        if self.replication is not None:
            self.replication.on_register_result(ha_server_addr, master_addr)

    async def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            ready = [w for w in self.workers if self.plane.ready.get(w.wid) and self.plane.ready[w.wid].is_set()]
            if len(ready) == len(self.workers):
                return
            for w in self.workers:
                if w.popen is not None and w.popen.poll() is not None:
                    raise RuntimeError(f"worker {w.wid} exited with code {w.popen.returncode} during start-up")
            if time.monotonic() > deadline:
                raise RuntimeError(f"workers not ready within {timeout:g}s")
            await asyncio.sleep(0.02)

    async def _abort_start(self) -> None:
        self._stopping = True
        if self.metrics is not None:
            self.metrics.stop()
        await self._stop_workers()
        if self._ctl_server is not None:
            self._ctl_server.close()
        if self.tx_check is not None:
            self.tx_check.stop()
        if self.schedule is not None:
            self.schedule.stop()
        if self.timer is not None:
            self.timer.stop()
        if self.pop is not None:
            self.pop.stop()
        if self.cq_files is not None:
            await asyncio.to_thread(self.cq_files.stop)
        if self.replication is not None:
            await self.replication.close()
        if self.store is not None:
            self.store.close()
            self.store = None
        for s in self._reserved:
            s.close()

    # ================================================================ workers ==
    def _spawn(self, w: WorkerProc) -> None:
        env = dict(os.environ)
        env["SHMQ_BROKER_CONFIG"] = self.cfg.to_json()
        env["SHMQ_WORKER_ID"] = str(w.wid)
        fds = self.pull_wake_fds
        if fds:
            env["SHMQ_PULL_WAKE_FDS"] = ",".join(f"{wid}:{fd}" for wid, fd in fds.items())
        passed = tuple(fds.values())
        if self.placement is not None:
            env["SHMQ_HANDOVER"] = placement.env_value(*self.placement)
            passed += placement.fds(*self.placement)
        else:
            env.pop("SHMQ_HANDOVER", None)
        w.popen = subprocess.Popen([sys.executable, "-m", "shmq.broker.worker.main"], env=env,
                                   stdin=subprocess.DEVNULL, start_new_session=True, pass_fds=passed)
        # Own session: a terminal's Ctrl-C reaches the supervisor only, which then stops
        # the workers in order (and does not mistake their exit for a crash).
        w.started = time.monotonic()
        self._watch(w)
        log.info("worker %d started (pid %d)", w.wid, w.popen.pid)

    def _watch(self, w: WorkerProc) -> None:
        """A pidfd of the worker on the event loop: its exit wakes the monitor at once."""
        self._unwatch(w)
        if not hasattr(os, "pidfd_open"):
            return
        try:
            fd = os.pidfd_open(w.popen.pid)
        except OSError:  # the kernel has none (or the worker is gone already: the backstop sees it)
            return
        w.pidfd = fd
        asyncio.get_running_loop().add_reader(fd, self._exited, w, fd)

    def _unwatch(self, w: WorkerProc) -> None:
        fd, w.pidfd = w.pidfd, None
        if fd is not None:
            try:
                asyncio.get_running_loop().remove_reader(fd)
            except RuntimeError:  # no loop running (a stop after the loop ended)
                pass
            os.close(fd)

    def _exited(self, w: WorkerProc, fd: int) -> None:
        if w.pidfd == fd:
            self._unwatch(w)
        if self._monitor is not None:
            self._monitor.wake()  # its round reaps the worker and schedules the restart
        # (an exit during start-up is _wait_ready's; one after stop began is nobody's)

    def _check_workers(self) -> None:
        for w in self.workers:
            if self._stopping or w.popen is None or w.popen.poll() is None:
                continue
            rc = w.popen.returncode
            lived = time.monotonic() - w.started
            w.backoff = (self.cfg.workerRestartDelayMillis / 1000.0 if lived > 10 or not w.backoff
                         else min(w.backoff * 2, 10.0))
            log.warning("worker %d (pid %d) exited with %s after %.1fs; restarting in %.1fs",
                        w.wid, w.popen.pid, rc, lived, w.backoff)
            w.popen = None
            w.restarts += 1
            self._placement_down(w.wid)
            asyncio.get_running_loop().call_later(w.backoff, self._respawn, w)

    def _placement_down(self, wid: int) -> None:
        """A worker is gone: siblings send it no more sockets, and those it never took are
        closed (their clients see the connection close and reconnect, to a live worker)."""
        if self.placement is None:
            return
        loads, boxes = self.placement
        loads.set(wid, placement.DOWN, 0)
        for fd in placement.take_fds(boxes.recv[wid]):
            os.close(fd)

    def _respawn(self, w: WorkerProc) -> None:
        if not self._stopping and w.popen is None:
            self._spawn(w)

    async def _stop_workers(self, timeout: float | None = None) -> None:
        timeout = timeout if timeout is not None else self.cfg.shutdownGraceMillis / 1000.0 + 5.0
        procs = [w.popen for w in self.workers if w.popen is not None]
        for p in procs:
            if p.poll() is None:
                p.terminate()
        deadline = time.monotonic() + timeout
        for p in procs:
            while p.poll() is None and time.monotonic() < deadline:
                await asyncio.sleep(0.02)
            if p.poll() is None:
                log.warning("worker pid %d did not stop in time; killing it", p.pid)
                p.kill()
                p.wait()
        for w in self.workers:
            self._unwatch(w)

    def worker_pids(self) -> list[int]:
        return [w.popen.pid for w in self.workers if w.popen is not None and w.popen.poll() is None]

    # ================================================================ housekeeping ==
    async def _persist_offsets(self) -> None:
        # A thread: the write fsyncs, and the control channel must not wait for the disk.
        await asyncio.to_thread(self._persist_offsets_now)

    def _persist_offsets_now(self) -> None:
        # The lock keeps a periodic write from racing the final one in close().
        with self._persist_lock:
            if self.store is None:
                return
            try:
                self.store.persist_offsets()
            except OSError as e:
                if e.errno not in (errno.ENOSPC, errno.EDQUOT):
                    raise
                # a full disk: the offsets stay in the control block, the old file stays whole
                if not self._offsets_held_back:
                    log.error("consumerOffset.json not written: %s; offsets are kept in memory, retrying", e)
                self._offsets_held_back = True
                return
            if self._offsets_held_back:
                self._offsets_held_back = False
                log.warning("consumerOffset.json written again: the disk has room")

    # ================================================================ stop ==
    def stop(self) -> None:
        """Ask for a shutdown (signal handlers call this)."""
        self.stopped.set()

    async def close(self) -> None:
        if self._stopping and self.store is None:
            return
        self._stopping = True
        for svc in self._housekeeping:
            await svc.stop()
        if self.tx_check is not None:
            await asyncio.to_thread(self.tx_check.stop)  # no check-back to a worker going away
            self.tx_check = None
        if self.registrar is not None:
            await self.registrar.close()
        if self.metrics is not None:
            await asyncio.to_thread(self.metrics.stop)
            self.metrics = None
        await self._stop_workers()
        if self._ctl_server is not None:
            self._ctl_server.close()
            try:
                os.unlink(self.cfg.control_path)
            except FileNotFoundError:
                pass
        if self.tx_check is not None:
            # In a thread: the service may be waiting on this loop (forward_threadsafe).
            await asyncio.to_thread(self.tx_check.stop)
        if self.schedule is not None:
            await asyncio.to_thread(self.schedule.stop)  # before the store closes: it flushes and persists its progress
        if self.timer is not None:
            await asyncio.to_thread(self.timer.stop)     # likewise: it flushes and writes its checkpoint
        if self.pop is not None:
            await asyncio.to_thread(self.pop.stop)       # syncs its journal
        if self.cq_files is not None:
            await asyncio.to_thread(self.cq_files.stop)
        if self.replication is not None:
            await self.replication.close()
            self.replication = None
        with self._persist_lock:
            if self.store is not None:
                self.store.close()  # flush, checkpoint, persist offsets, remove abort
                self.store = None
        for s in self._reserved:
            s.close()
        self._reserved = []
        if self.placement is not None:
            for w in self.workers:
                self._placement_down(w.wid)
            for part in self.placement:
                part.close()
            self.placement = None
        log.info("broker %s stopped", self.cfg.brokerName)

    def describe(self) -> dict:
        return {"address": self.address, "vipPort": self.cfg.vip_port, "workers": len(self.workers),
                "store": self.cfg.store_root, "pids": self.worker_pids(), "brokerId": self.cfg.brokerId,
                "ha": self.replication.describe() if self.replication else None,
                "metricsPort": self.metrics.port if self.metrics is not None else None}

    def describe_json(self) -> str:
        return json.dumps(self.describe())
