"""``shmq-broker -c broker.conf``: run a broker (supervisor + workers) in the foreground.

Prints ``shmq-broker listening on HOST:PORT (vip PORT-2, N workers, store DIR)`` once every
worker serves. Argument parsing only; the broker is :class:`shmq.broker.supervisor.main.Supervisor`.
"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from shmq.broker.shared.config import BrokerConfig
from shmq.broker.shared.acl import AclError
from shmq.broker.supervisor.main import Supervisor
from shmq.errors import StoreLocked
from shmq.protocol import loop as loops


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shmq-broker",
                                description="RocketMQ 4.x compatible broker (supervisor + worker processes).")
    p.add_argument("-c", "--config", metavar="FILE", help="broker.conf: Java properties with RocketMQ key names")
    p.add_argument("-n", "--namesrv", metavar="ADDR", help="NameServer address(es), ';'-separated (namesrvAddr)")
    p.add_argument("--port", type=int, default=None, help="listenPort (0 picks a free pair port/port-2)")
    p.add_argument("--store", metavar="DIR", help="storePathRootDir")
    p.add_argument("--workers", type=int, default=None, help="worker processes (default min(cpu_count, 4))")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override one config key (repeatable), e.g. --set channelExpiredTimeout=5000")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def load_config(args: argparse.Namespace) -> BrokerConfig:
    cfg = BrokerConfig.from_file(args.config) if args.config else BrokerConfig()
    overrides: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value
    if args.namesrv is not None:
        overrides["namesrvAddr"] = args.namesrv
    if args.port is not None:
        overrides["listenPort"] = str(args.port)
    if args.store is not None:
        overrides["storePathRootDir"] = args.store
    if args.workers is not None:
        overrides["workers"] = str(args.workers)
    cfg.update(overrides, source="command line")
    return cfg


def setup_logging(level: str) -> None:
    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s",
                        stream=sys.stderr)


async def run_broker(sup: Supervisor, announce) -> int:
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, sup.stop)
    try:
        await sup.start()
    except StoreLocked as e:
        print(f"shmq-broker: {e}", file=sys.stderr)
        return 1
    except (OSError, AclError) as e:
        print(f"shmq-broker: cannot start: {e}", file=sys.stderr)
        return 1
    announce(sup)
    await sup.stopped.wait()
    logging.getLogger("shmq.broker").info("shutting down")
    await sup.close()
    return 0


def _announce(sup: Supervisor) -> None:
    c = sup.cfg
    print(f"shmq-broker listening on {sup.address} (vip {c.vip_port}, {len(sup.workers)} workers, "
          f"store {c.store_root}, pid {__import__('os').getpid()})", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.log_level)
    try:
        cfg = load_config(args)
    except (OSError, ValueError) as e:
        print(f"shmq-broker: {e}", file=sys.stderr)
        return 2
    import os
    os.environ.setdefault("SHMQ_LOG_LEVEL", args.log_level)
    try:
        return loops.run(run_broker(Supervisor(cfg), _announce))
    except KeyboardInterrupt:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
