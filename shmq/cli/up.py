"""``shmq up``: a NameServer and one broker in the foreground on the embedded store ``./.shmq/``.

``--slaves N`` adds N slaves of that broker (brokerId 1..N, stores ``<dir>-slave-<i>``, ports
listenPort + 10 * i), so a master/slave pair runs on one host for trying replication;
``--set brokerRole=SYNC_MASTER`` makes the master synchronous (default ASYNC_MASTER).

The first command a newcomer runs: no config needed, loopback only. Prints the
NameServer and broker addresses; Ctrl-C stops both cleanly (the broker unregisters,
flushes and persists offsets first).
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

from shmq.broker.shared.config import BrokerConfig
from shmq.broker.supervisor.main import Supervisor
from shmq.errors import StoreLocked
from shmq.namesrv import NamesrvConfig, NameServer
from shmq.protocol import loop as loops


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("up", help="run a NameServer and a broker on ./.shmq/ in the foreground",
                       description="NameServer + broker in the foreground on an embedded store (default ./.shmq/).")
    p.add_argument("--dir", default=".shmq", help="store directory (default ./.shmq)")
    p.add_argument("--namesrv-port", type=int, default=9876, help="NameServer port (default 9876; 0 = any)")
    p.add_argument("--port", type=int, default=10911, help="broker listenPort (default 10911; 0 = any)")
    p.add_argument("--listen", default="127.0.0.1", help="address both bind (default 127.0.0.1)")
    p.add_argument("--workers", type=int, default=None, help="broker worker processes (default min(cpu, 4))")
    p.add_argument("--slaves", type=int, default=0, help="also run this many slaves of the broker (default 0)")
    p.add_argument("-c", "--config", metavar="FILE", help="broker.conf with more settings")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[], help="override one broker key")
    p.add_argument("--log-level", default="WARNING", help="logging level (default WARNING)")
    return p


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s", stream=sys.stderr)
    os.environ.setdefault("SHMQ_LOG_LEVEL", args.log_level)
    try:
        cfg = BrokerConfig.from_file(args.config) if args.config else BrokerConfig()
        overrides = dict(item.split("=", 1) for item in args.set if "=" in item)
        overrides.update({"storePathRootDir": os.path.abspath(args.dir), "listenPort": str(args.port),
                          "listenAddress": args.listen, "brokerIP1": args.listen if args.listen != "0.0.0.0" else "127.0.0.1"})
        if args.workers is not None:
            overrides["workers"] = str(args.workers)
        cfg.update(overrides, source="shmq up")
    except (OSError, ValueError) as e:
        print(f"shmq up: {e}", file=sys.stderr)
        return 2
    try:
        return loops.run(_up(cfg, args))
    except KeyboardInterrupt:
        return 0


async def _up(cfg: BrokerConfig, args: argparse.Namespace) -> int:
    ns = NameServer(NamesrvConfig(listenPort=args.namesrv_port, bindAddress=args.listen))
    try:
        await ns.start()
    except OSError as e:
        print(f"shmq up: NameServer cannot listen on {args.listen}:{args.namesrv_port}: {e}", file=sys.stderr)
        return 1
    cfg.namesrvAddr = ns.address
    sups = [Supervisor(c) for c in [cfg] + [_slave_config(cfg, i) for i in range(1, args.slaves + 1)]]
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    started = []
    try:
        for sup in sups:
            await sup.start()
            started.append(sup)
    except (OSError, StoreLocked, RuntimeError, ValueError) as e:
        print(f"shmq up: broker cannot start: {e}", file=sys.stderr)
        for sup in reversed(started):
            await sup.close()
        await ns.close()
        return 1
    print(f"shmq namesrv listening on {ns.address}", flush=True)
    for sup in sups:
        c = sup.cfg
        role = f"{c.brokerRole} brokerId {c.brokerId}" + (f", HA port {c.ha_port}" if not c.is_slave else "")
        print(f"shmq broker {c.brokerName} listening on {sup.address} ({len(sup.workers)} workers, "
              f"store {c.store_root}, {role})", flush=True)
    print(f"clients: namesrvAddr={ns.address}   (Ctrl-C stops all)", flush=True)
    waiters = [loop.create_task(stop.wait())] + [loop.create_task(s.stopped.wait()) for s in sups]
    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    for t in waiters:
        t.cancel()
    for sup in reversed(sups):
        await sup.close()
    await ns.close()
    return 0


def _slave_config(master: BrokerConfig, i: int) -> BrokerConfig:
    """Slave ``i`` of ``master``: same names and settings, brokerId i, its own store and ports."""
    c = BrokerConfig.from_json(master.to_json())
    c.brokerRole, c.brokerId = "SLAVE", i
    c.storePathRootDir = f"{master.store_root}-slave-{i}"
    c.listenPort = master.listenPort + 10 * i if master.listenPort else 0
    c.haListenPort = 0
    c.controlSocket = ""
    c.check()
    return c
