"""Shared helpers for integration tests: real processes on ephemeral ports, always cleaned up.

``start_process(argv, ready=regex)`` starts a command, waits for its readiness line on
stdout and returns a :class:`Proc` (``.pid``, ``.match``, ``.stop()``, ``.log()``).
Everything started through the ``processes`` fixture is stopped by pid at teardown
(SIGTERM, then SIGKILL), whatever the test did.

Fixtures:

* ``namesrv`` — one ``shmq-namesrv --port 0`` (``.addr`` is ``"127.0.0.1:PORT"``);
* ``start_namesrv(*extra_args, settings={key: value})`` — start more, with settings such as
  ``brokerChannelExpiredTime``.

:func:`run_ons_client` drives ali-ons, a third-party RocketMQ client from npm, through
``tests/thirdparty/ons_client.js`` (installed by ``scripts/test``; skipped without node).
"""
from __future__ import annotations

import json
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

THIRDPARTY = Path(__file__).resolve().parent.parent / "thirdparty"


class Proc:
    def __init__(self, popen: subprocess.Popen[bytes], match: re.Match[str], log_path: Path, argv: list[str]):
        self.popen = popen
        self.pid = popen.pid
        self.match = match
        self.log_path = log_path
        self.argv = argv

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 5.0) -> int | None:
        """SIGTERM, wait, SIGKILL: by pid, this process only."""
        if self.popen.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(timeout)
        if self.popen.stdout is not None:
            self.popen.stdout.close()
        return self.popen.returncode


def start_process(argv: list[str], ready: str, log_path: Path, timeout: float = 20.0,
                  env: dict[str, str] | None = None) -> Proc:
    """Start ``argv`` and wait until a stdout line matches ``ready``; stderr goes to ``log_path``."""
    log_file = open(log_path, "wb")
    try:
        popen = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log_file, stdin=subprocess.DEVNULL,
                                 env=env, start_new_session=True)
    finally:
        log_file.close()
    pattern = re.compile(ready)
    sel = selectors.DefaultSelector()
    sel.register(popen.stdout, selectors.EVENT_READ)  # type: ignore[arg-type]
    deadline = time.monotonic() + timeout
    buf = b""
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or popen.poll() is not None:
                break
            if not sel.select(left):
                continue
            chunk = os.read(popen.stdout.fileno(), 4096)  # type: ignore[union-attr]
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                m = pattern.search(line)
                if m:
                    return Proc(popen, m, log_path, argv)
    finally:
        sel.close()
    proc = Proc(popen, None, log_path, argv)  # type: ignore[arg-type]
    proc.stop()
    raise RuntimeError(f"{argv} not ready within {timeout}s; stdout={buf!r}\nstderr:\n{proc.log()}")


class NamesrvProc(Proc):
    @property
    def addr(self) -> str:
        return f"127.0.0.1:{self.match.group(1)}"

    @property
    def port(self) -> int:
        return int(self.match.group(1))


NAMESRV_READY = r"shmq-namesrv listening on 127\.0\.0\.1:(\d+)"


@pytest.fixture
def processes() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for p in reversed(started):
        p.stop()


@pytest.fixture
def start_namesrv(processes: list[Proc], tmp_path: Path):
    counter = iter(range(1000))

    def start(*extra: str, settings: dict[str, object] | None = None) -> NamesrvProc:
        n = next(counter)
        argv = [sys.executable, "-m", "shmq.cli.namesrv", "--port", "0", *extra]
        for k, v in (settings or {}).items():
            argv += ["--set", f"{k}={v}"]
        p = start_process(argv, NAMESRV_READY, tmp_path / f"namesrv-{n}.log")
        p.__class__ = NamesrvProc
        processes.append(p)
        return p  # type: ignore[return-value]

    return start


@pytest.fixture
def namesrv(start_namesrv) -> NamesrvProc:
    return start_namesrv()


def node_harness_or_skip() -> list[str]:
    """``[node, ons_client.js]``, or skip when node or the npm packages are missing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the ali-ons (third-party RocketMQ client) tests need Node.js")
    if not (THIRDPARTY / "node_modules" / "ali-ons").is_dir():
        pytest.skip("ali-ons is not installed in tests/thirdparty/node_modules (scripts/test runs npm install)")
    return [node, str(THIRDPARTY / "ons_client.js")]


def run_ons_client(*args: str, timeout: float = 60.0) -> list[dict]:
    """Run ``tests/thirdparty/ons_client.js`` (modes route, produce, consume; see its header) and
    return its JSON lines; fails the test with both output streams if it exits non-zero.
    Skips when node or ali-ons is missing."""
    argv = node_harness_or_skip() + list(args)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert out.returncode == 0, f"{argv}\nstdout={out.stdout}\nstderr={out.stderr}"
    return events
