"""Request dispatch of a worker: the one table from request code to handler.

Each processor module (``processors/*``) has a ``Processor(ctx)`` whose ``handlers()`` maps
the request codes of its family to handlers; this module asks every family in a fixed order
and hands the merged table to the worker's RemotingServer. A code answered by no family gets
the server's REQUEST_CODE_NOT_SUPPORTED. Anything every request must pass through (checks
before the handler runs) belongs here, in one place for every family.
"""
from __future__ import annotations

from shmq.protocol.transport import FastFrames, Handler

from shmq.broker.shared.acl import PlainAcl

from . import acl_check
from .context import WorkerContext
from .processors import admin, admin_clients, admin_stats, consumer, pop, pull, send, slave_sync, timer

#: Later families win a code two of them name (none does today).
FAMILIES = (send, pull, consumer, admin, slave_sync, timer, pop, admin_stats, admin_clients)


def handlers(ctx: WorkerContext, acl: PlainAcl | None = None) -> dict[int, Handler]:
    """Every family's handlers; with ``acl`` each one behind the ACL check (acl_check.py), so
    no request code is served unchecked (unknown codes are answered "not supported" before
    any check, as in RocketMQ)."""
    return build(ctx, acl)[0]


def build(ctx: WorkerContext, acl: PlainAcl | None = None, pull_fast: bool = True
          ) -> tuple[dict[int, Handler], FastFrames | None]:
    """:func:`handlers`, and the C path for the connections (send_fast.py, with the common pull
    in the same call unless ``pull_fast`` is False: pull_fast.py), None with ``acl``: no request
    passes the ACL check unchecked."""
    table: dict[int, Handler] = {}
    fast = pulls = None
    for family in FAMILIES:
        proc = family.Processor(ctx)
        table.update(proc.handlers())
        if family is send and acl is None:
            fast = proc.fast_path()
        if family is pull:
            pulls = proc
    if fast is not None and pulls is not None and pull_fast:
        fast.take_pulls(pulls)
    if acl is not None:
        table = {code: acl_check.guard(acl, h) for code, h in table.items()}
    return table, fast
