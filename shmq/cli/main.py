"""``shmq``: the umbrella command. Subcommands register themselves in :data:`COMMANDS`
(name -> module with ``add_parser(subparsers)`` and ``run(args) -> int``), so admin
commands (topic, cluster, consumer ...) plug in without touching the others."""
from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> module implementing ``add_parser(subparsers)`` and ``run(args)``.
COMMANDS: dict[str, str] = {
    "up": "shmq.cli.up",
    "dashboard": "shmq.cli.dashboard",
    "timer": "shmq.cli.timer",
    "store": "shmq.cli.store_gc",
    "chaos": "shmq.cli.chaos",
}


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="shmq", description="shmq: a RocketMQ-compatible broker for one host.")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    for name, modname in COMMANDS.items():
        mod = importlib.import_module(modname)
        sp = mod.add_parser(sub)
        sp.set_defaults(_run=mod.run)
    from shmq.cli import admin, mqadmin_parsers
    admin.add_parsers(sub)
    mqadmin_parsers.add_parsers(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "_run", None) is None:
        parser.print_help()
        return 2
    return args._run(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
