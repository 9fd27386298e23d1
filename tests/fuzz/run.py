"""Run one fuzz target under atheris (libFuzzer for Python, coverage-guided).

    python -m tests.fuzz.run TARGET [libFuzzer flags, e.g. -runs=1000000 -rss_limit_mb=1024 -max_len=4096]
    python -m tests.fuzz.run all -runs=N ...      every target in turn

An input that makes the target raise anything but its documented exception is a crash:
libFuzzer prints it, writes it to crash-<sha1>, and the exit code is non-zero. -rss_limit_mb
makes unbounded memory growth a failure too. Prints one summary line per target.
"""
from __future__ import annotations

import subprocess
import sys
import time


#: The targets of tests/fuzz/targets.py (not imported here: see _fuzz_one).
NAMES = ("frame", "command", "record", "properties", "batch", "sql92")


def _fuzz_one(name: str, flags: list[str]) -> int:
    import atheris
    # nothing of shmq may be imported before this, or it runs uninstrumented (no coverage)
    with atheris.instrument_imports(include=["shmq.protocol", "shmq.store", "tests.fuzz"]):
        from tests.fuzz import targets
    fn = targets.TARGETS.get(name)
    if fn is None:
        print(f"unknown target {name}; one of {', '.join(targets.TARGETS)}", file=sys.stderr)
        return 2
    import tempfile
    corpus = tempfile.mkdtemp(prefix=f"shmq-fuzz-{name}-")  # seeds in, new inputs out
    for i, seed in enumerate(targets.seeds()[name]):
        with open(f"{corpus}/seed{i}", "wb") as f:
            f.write(seed)
    atheris.Setup([sys.argv[0], *flags, corpus], fn)
    atheris.Fuzz()  # exits the process: 0 when -runs completed without a crash
    return 0


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__)
        return 2
    name, flags = argv[0], argv[1:]
    if name != "all":
        return _fuzz_one(name, flags)
    worst = 0
    for t in NAMES:
        t0 = time.monotonic()
        r = subprocess.run([sys.executable, "-m", "tests.fuzz.run", t, *flags], capture_output=True, text=True)
        done = [ln for ln in r.stderr.splitlines() if ln.startswith("Done ")]
        print(f"{t}: exit {r.returncode}, {done[-1] if done else 'no summary'}, {time.monotonic() - t0:.1f}s",
              flush=True)
        if r.returncode != 0:
            sys.stderr.write(r.stderr[-4000:])
        worst = worst or r.returncode
    return worst


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
