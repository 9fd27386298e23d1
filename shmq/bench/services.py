"""Everything a bench run starts outside its own process, and the guarantee that it goes away.

``Env`` owns one temporary root (``shmq-bench-run-*`` under the system temp dir); every store,
socket and server directory of the run lives below it. Processes are tracked by pid and
stopped by pid (SIGTERM, then SIGKILL); the shared-memory control block of every store
created here is unlinked by name; the temporary root is removed. ``Env.close`` does all of
that whatever happened before (also at interpreter exit, and it is idempotent), and keeps
an inventory (``Env.inventory``) the tests check against.

Servers: ``namesrv()`` runs ``shmq-namesrv --port 0``; ``broker(flush)`` runs ``shmq-broker``
on a temporary store (one per flush mode, started on first use); each is skipped with a
reason when its command is not installed yet or fails to start.
"""
from __future__ import annotations

import atexit
import importlib.util
import os
import re
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time

#: broker settings for bench runs: short registration so new topics route at once
BROKER_SETTINGS = {
    "registerNameServerPeriod": 1000,
    "mappedFileSizeCommitLog": 256 * 1024 * 1024,
    "autoCreateTopicEnable": "true",
    # statvfs on some VMs counts reserved blocks as used (76% on the recording machine): keep
    # the store's disk-pressure expiry from deleting CommitLog files in the middle of a run
    "diskMaxUsedSpaceRatio": 95,
}


class ServiceUnavailable(Exception):
    """A server the run wanted could not be started (the message says why)."""


class Env:
    def __init__(self, *, workers: int | None = None, keep: bool = False, dir: str | None = None):
        self.root = tempfile.mkdtemp(prefix="shmq-bench-run-", dir=dir)  # dir: e.g. on disk, not tmpfs
        self.workers = workers
        self.keep = keep
        self._pids: dict[int, subprocess.Popen | None] = {}
        self._stores: set[str] = set()
        self._dirs: list[str] = [self.root]
        self._namesrv: str | None = None
        self._namesrv_error: str | None = None
        self._brokers: dict[str, str | Exception] = {}
        self._broker_stores: dict[str, str] = {}
        self.inventory = {"pids": [], "segments": [], "dirs": [self.root]}
        self._closed = False
        atexit.register(self.close)

    # ---- bookkeeping ------------------------------------------------------------------
    def tmpdir(self, prefix: str) -> str:
        d = tempfile.mkdtemp(prefix=prefix, dir=self.root)
        return d

    def socket_dir(self) -> str:
        """A directory with a short path for Unix sockets (sun_path holds 107 bytes; pytest's
        and the user's temp roots can be longer), removed by ``remove_tmpdir`` or ``close``."""
        d = self.tmpdir("s")
        if len(d) > 60:
            d = tempfile.mkdtemp(prefix="shmq-bench-run-s", dir="/tmp")
            self._dirs.append(d)
            self.inventory["dirs"].append(d)
        return d

    def remove_tmpdir(self, d: str) -> None:
        shutil.rmtree(d, ignore_errors=True)

    def track_process(self, pid: int, popen: subprocess.Popen | None = None) -> None:
        self._pids[pid] = popen
        self.inventory["pids"].append(pid)

    def untrack_process(self, pid: int) -> None:
        self._pids.pop(pid, None)

    def track_store(self, root: str) -> None:
        """A store whose shm control block must not outlive the run."""
        from shmq.store.control import segment_name
        self._stores.add(os.path.abspath(root))
        self.inventory["segments"].append(segment_name(root))

    # ---- servers ----------------------------------------------------------------------
    def spawn(self, argv: list[str], ready: str, log_name: str, timeout: float = 30.0,
              env: dict | None = None) -> tuple[subprocess.Popen, re.Match]:
        """Start a server in its own session (Ctrl-C in the terminal does not reach it; we stop
        it by pid; it gets SIGTERM if the harness dies) and wait for a stdout line matching
        ``ready``."""
        log_path = os.path.join(self.root, log_name)
        with open(log_path, "wb") as log:
            p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL,
                                 start_new_session=True, env=env, preexec_fn=_die_with_parent)
        self.track_process(p.pid, p)
        pattern = re.compile(ready)
        sel = selectors.DefaultSelector()
        sel.register(p.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout
        buf = b""
        try:
            while time.monotonic() < deadline:
                if not sel.select(0.1):
                    if p.poll() is not None:
                        break
                    continue
                chunk = os.read(p.stdout.fileno(), 4096)
                if not chunk:
                    break
                buf += chunk
                for line in buf.decode(errors="replace").splitlines():
                    m = pattern.search(line)
                    if m:
                        return p, m
        finally:
            sel.close()
        self.stop_process(p.pid)
        tail = _tail(log_path)
        raise ServiceUnavailable(f"{os.path.basename(argv[0]) if argv[0] != sys.executable else ' '.join(argv[1:3])} "
                                 f"did not start{': ' + tail if tail else ''}")

    def namesrv(self) -> str:
        """Address of this run's NameServer (started on first use)."""
        if self._namesrv:
            return self._namesrv
        if self._namesrv_error:
            raise ServiceUnavailable(self._namesrv_error)
        if importlib.util.find_spec("shmq.cli.namesrv") is None:
            self._namesrv_error = "shmq-namesrv is not installed"
            raise ServiceUnavailable(self._namesrv_error)
        try:
            _, m = self.spawn([sys.executable, "-m", "shmq.cli.namesrv", "--port", "0", "--log-level", "WARNING"],
                              r"listening on (\S+:\d+)", "namesrv.log")
        except ServiceUnavailable as e:
            self._namesrv_error = str(e)
            raise
        self._namesrv = m.group(1)
        return self._namesrv

    def broker(self, flush: str = "ASYNC_FLUSH") -> str:
        """Address of this run's broker for ``flush`` (ASYNC_FLUSH or SYNC_FLUSH), started on
        first use on a temporary store, registered with this run's NameServer."""
        got = self._brokers.get(flush)
        if isinstance(got, Exception):
            raise got
        if got:
            return got
        try:
            store = os.path.join(self.socket_dir(), "store")  # short: the broker binds a Unix socket in it
            _, addr = self.start_broker(store, flush, f"bench-{flush.lower()}")
            self._brokers[flush] = addr
            self._broker_stores[flush] = store
            self.wait_prefaulted(store)
            return addr
        except ServiceUnavailable as e:
            self._brokers[flush] = e
            raise

    def start_broker(self, store: str, flush: str, name: str, **settings) -> tuple[int, str]:
        """A broker of this run on ``store`` (created, or reopened after ``stop_process``),
        registered with this run's NameServer as ``name``: (pid, address)."""
        if importlib.util.find_spec("shmq.cli.broker") is None:
            raise ServiceUnavailable("shmq-broker is not installed yet (the broker issue)")
        ns = self.namesrv()
        self.track_store(store)
        argv = [sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", store,
                "--namesrv", ns, "--log-level", "WARNING"]
        if self.workers:
            argv += ["--workers", str(self.workers)]
        for k, v in dict(BROKER_SETTINGS, flushDiskType=flush, brokerName=name, **settings).items():
            argv += ["--set", f"{k}={v}"]
        p, m = self.spawn(argv, r"listening on (\S+:\d+)", f"broker-{name}.log", timeout=60)
        return p.pid, m.group(1)

    def wait_prefaulted(self, store: str, timeout: float = 20.0) -> bool:
        """Until a new broker's flush thread has pre-touched its first two CommitLog files
        (``MessageStore.prealloc_tick``: BROKER_SETTINGS' 256 MiB each, zeroed by the kernel at
        ~1 GB/s here, most of a fresh broker's CPU for a second or two). The shmq-store row waits
        for the same before its run; without this the client row that starts a broker had it in
        its window (measured: 20 us/msg of broker CPU in such a row, 5-8 in the next). True once
        both are in the page cache (90 %: the kernel may evict a little)."""
        from .pagecache import resident_total
        from shmq.store.config import StoreConfig
        size = int(BROKER_SETTINGS["mappedFileSizeCommitLog"])
        paths = [os.path.join(StoreConfig(root=store).commitlog_dir, f"{i * size:020d}") for i in (0, 1)]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(os.path.exists(p) for p in paths) and resident_total(paths)[0] >= 0.9 * 2 * size:
                return True
            time.sleep(0.05)
        return False

    def broker_pids(self, flush: str = "ASYNC_FLUSH") -> list[int]:
        """Supervisor and workers of the broker for ``flush`` (for CPU accounting)."""
        import psutil
        out = []
        for pid, p in self._pids.items():
            if p is not None and "shmq.cli.broker" in p.args and f"bench-{flush.lower()}" in " ".join(p.args):
                out.append(pid)
                try:
                    out += [c.pid for c in psutil.Process(pid).children(recursive=True)]
                except psutil.Error:
                    pass
        return out

    # ---- teardown ---------------------------------------------------------------------
    def stop_process(self, pid: int, timeout: float = 10.0) -> None:
        popen = self._pids.pop(pid, None)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        if popen is not None:
            try:
                popen.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                popen.wait(5)
            for f in (popen.stdout, popen.stderr):
                if f:
                    f.close()
        else:
            _wait_gone(pid, timeout)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        # brokers before the NameServer (they unregister), newest first
        for pid in reversed(list(self._pids)):
            self.stop_process(pid)
        for root in self._stores:
            _unlink_segment(root)
        if not self.keep:
            for d in self._dirs:
                shutil.rmtree(d, ignore_errors=True)
        atexit.unregister(self.close)

    def __enter__(self) -> "Env":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the harness dies, even by SIGKILL (Linux
    PR_SET_PDEATHSIG), so no server outlives a killed run."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _unlink_segment(root: str) -> None:
    try:
        import posix_ipc

        from shmq.store.control import segment_name
        posix_ipc.unlink_shared_memory(segment_name(root))
    except Exception:
        pass


def _wait_gone(pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                return
        except ChildProcessError:
            pass
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _tail(path: str, n: int = 300) -> str:
    try:
        with open(path, "rb") as f:
            data = f.read()[-n:]
        return " ".join(data.decode(errors="replace").split())
    except OSError:
        return ""


def free_port() -> int:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
