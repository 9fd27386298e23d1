"""``shmq store gc``: remove shared-memory segments of stores that are gone or whose owner is
provably dead (never one in use); see :mod:`shmq.store.segment_gc`. Prints one line per
segment and a summary; exit 0."""
from __future__ import annotations

import argparse

from shmq.store.segment_gc import collect


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("store", help="store maintenance")
    ssub = p.add_subparsers(dest="store_command", metavar="STORE_COMMAND")
    gc = ssub.add_parser("gc", help="remove leftover shared-memory segments nobody can use")
    gc.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    gc.add_argument("--under", metavar="DIR", help="only segments of stores under DIR")
    gc.add_argument("--missing-only", action="store_true",
                    help="only segments whose store directory is gone (what a broker does at start)")
    return p


def run(args) -> int:
    if getattr(args, "store_command", None) != "gc":
        print("usage: shmq store gc [--dry-run] [--under DIR] [--missing-only]")
        return 2
    found = collect(existing=not args.missing_only, under=args.under, dry_run=args.dry_run)
    for seg in found:
        print(seg.line())
    removed = sum(1 for s in found if s.action in ("removed", "removable"))
    print(f"{len(found)} segments, {removed} {'removable' if args.dry_run else 'removed'}, "
          f"{sum(1 for s in found if s.action == 'kept')} in use")
    return 0
