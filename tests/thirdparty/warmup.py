"""Resolve the Maven artifacts of the Java third-party tests before pytest starts.

The first resolution on a fresh machine downloads ~100 jars and can take minutes: inside a test
it would race pytest's per-test timeout. ``scripts/test`` runs this first; it prints progress,
never fails the run (a test whose artifact is refused skips and says why) and costs nothing once
the cache outside the repository (jvm.CACHE, ~/.m2) holds everything.

    python -m tests.thirdparty.warmup
"""
from __future__ import annotations

import sys
import time

from . import jvm

#: every classpath a third-party test asks for; add yours here
CLASSPATHS: list[tuple[str, ...]] = [
    (jvm.ROCKETMQ_BROKER, jvm.ROCKETMQ_NAMESRV),   # Apache RocketMQ, the oracle
    (jvm.ROCKETMQ_CLIENT,),
    (jvm.ROCKETMQ_TOOLS,),
]


def main() -> int:
    from .harnesses import build_all
    reason = jvm.missing_tools()
    if reason:
        print(f"thirdparty warm-up: skipped ({reason}); the Java tests will skip", file=sys.stderr)
        try:
            build_all()  # the Go harness needs no JDK
        except Exception as e:  # noqa: BLE001 - its test builds again and says why
            print(f"thirdparty warm-up: harness build failed: {e}", file=sys.stderr)
        return 0
    for arts in CLASSPATHS:
        t0 = time.monotonic()
        print(f"thirdparty warm-up: resolving {' '.join(arts)} ...", file=sys.stderr, flush=True)
        try:
            cp = jvm.classpath(*arts)
        except Exception as e:  # refused, timed out: the tests that need it skip or fail
            print(f"thirdparty warm-up: unavailable: {e}", file=sys.stderr)
            continue
        print(f"thirdparty warm-up: {len(cp.split(':'))} jars in {time.monotonic() - t0:.1f}s",
              file=sys.stderr, flush=True)
    try:  # the Java harnesses compiled against those classpaths, and the Go binary
        build_all()
    except Exception as e:  # noqa: BLE001 - the tests that need one build again and fail saying why
        print(f"thirdparty warm-up: harness build failed: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
