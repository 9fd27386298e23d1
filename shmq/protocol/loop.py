"""Event-loop choice: uvloop when installed (the ``fast`` extra) and not disabled.

``SHMQ_UVLOOP=0`` forces the standard loop, e.g. to compare the two or to debug.
"""
from __future__ import annotations

import asyncio
import os
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def uvloop_enabled() -> bool:
    if os.environ.get("SHMQ_UVLOOP", "1") == "0":
        return False
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def new_event_loop() -> asyncio.AbstractEventLoop:
    if uvloop_enabled():
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def run(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` on the best loop available."""
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        return runner.run(main)


def loop_name() -> str:
    return "uvloop" if uvloop_enabled() else "asyncio"
