"""``shmq-namesrv``: run a NameServer in the foreground. Argument parsing only."""
from __future__ import annotations

import argparse
import logging
import sys

from shmq.namesrv import NamesrvConfig
from shmq.namesrv.server import run
from shmq.protocol.loop import loop_name


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shmq-namesrv",
        description="RocketMQ 4.x compatible NameServer. Prints 'shmq-namesrv listening on HOST:PORT' once ready.",
    )
    p.add_argument("--listen", default=None, help="address to bind (default 127.0.0.1, or bindAddress from -c)")
    p.add_argument("--port", type=int, default=None,
                   help="port (default 9876, or listenPort from -c); 0 picks a free port")
    p.add_argument("-c", "--config", metavar="FILE", help="Java-properties file with RocketMQ NameServer keys")
    p.add_argument("--set", metavar="KEY=VALUE", action="append", default=[],
                   help="override one config key (repeatable), e.g. --set brokerChannelExpiredTime=5000")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = NamesrvConfig.from_file(args.config) if args.config else NamesrvConfig()
        overrides = {}
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep:
                raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
            overrides[key.strip()] = value
        config.update(overrides, source="--set")
    except (OSError, ValueError) as e:
        print(f"shmq-namesrv: {e}", file=sys.stderr)
        return 2
    if args.listen is not None:
        config.bindAddress = args.listen
    if args.port is not None:
        config.listenPort = args.port
    return run(config, on_ready=lambda ns: print(f"shmq-namesrv listening on {ns.address} ({loop_name()})", flush=True))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
