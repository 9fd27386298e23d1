"""Apache RocketMQ 4.9.7 (NameServer and broker) started from the Maven Central jars, for the
oracle tests (differential, outgrow, store compatibility).

    home = RocketMQHome(tmp)                       # ROCKETMQ_HOME with conf/logback_*.xml
    ns = start_namesrv(home)                       # JvmProc; ns.addr == "127.0.0.1:PORT"
    br = start_broker(home, ns.addr, store_dir)    # waits until the NameServer lists it
    ...; br.stop(); ns.stop()                      # SIGTERM: the shutdown hook runs (clean store)

:func:`shared_oracle` is the once-per-test-run pair that every pytest-xdist worker shares (a file
lock and a list of users in a state directory keyed by the run; the last user stops it, and a
watchdog stops it if the whole run dies first).

What the JVMs need, found by starting them (not documented in one place upstream):
- ROCKETMQ_HOME with conf/logback_namesrv.xml / conf/logback_broker.xml, else startup exits;
- user.home pointed at a temp dir: the NameServer's kvConfig.json, the broker's default store
  and the logback files default under it;
- tls.server.mode=disabled: otherwise each server builds a self-signed SSL context at start
  (6-9 s each on this machine's 2 cores);
- --add-opens java.base/java.nio, jdk.internal.ref (and sun.nio.ch) on Java 17: MappedFile.clean reflects into
  DirectByteBuffer when the store shuts down; without it the clean shutdown throws and leaves
  the abort file behind (the next start then recovers as after a crash).
- A broker binds listenPort, listenPort-2 (the "VIP" fast channel) and listenPort+1 (HA): a free
  triple is picked. 4.9.7 has no bind address setting: the servers listen on the wildcard
  address; every test talks to them on 127.0.0.1 only.
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from . import jvm

NAMESRV_MAIN = "org.apache.rocketmq.namesrv.NamesrvStartup"
BROKER_MAIN = "org.apache.rocketmq.broker.BrokerStartup"
NAMESRV_READY = r"The Name Server boot success"
BROKER_READY = r"The broker\[.*\] boot success"

_JAVA17_OPENS = ["--add-opens", "java.base/java.nio=ALL-UNNAMED",
                 "--add-opens", "java.base/sun.nio.ch=ALL-UNNAMED",
                 "--add-opens", "java.base/java.lang=ALL-UNNAMED",
                 "--add-opens", "java.base/jdk.internal.ref=ALL-UNNAMED"]

_LOGBACK = """<configuration>
  <appender name="F" class="ch.qos.logback.core.FileAppender">
    <file>{log}</file>
    <encoder><pattern>%d{{HH:mm:ss.SSS}} %p %c{{1}} - %m%n</pattern></encoder>
  </appender>
  <root level="INFO"><appender-ref ref="F"/></root>
</configuration>
"""

#: broker.conf keys every oracle broker gets: loopback, small files, RocketMQ's defaults elsewhere.
BROKER_DEFAULTS = {
    "brokerClusterName": "OracleCluster",
    "brokerId": 0,
    "brokerIP1": "127.0.0.1",
    "mappedFileSizeCommitLog": 4 * 1024 * 1024,
    "mappedFileSizeConsumeQueue": 20 * 1000,
    "maxHashSlotNum": 4096,
    "maxIndexNum": 65536,
    "autoCreateTopicEnable": "true",
    "enablePropertyFilter": "true",
    "diskMaxUsedSpaceRatio": 95,
    "flushIntervalCommitLog": 50,
    "flushConsumerOffsetInterval": 500,
    # a retried message comes back after 1 s, not 10 s (tests wait for redeliveries)
    "messageDelayLevel": "1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s 1s",
    # a half message left UNKNOW is checked back after ~1 s, not 6 s + 60 s
    "transactionTimeOut": 1000,
    "transactionCheckInterval": 1000,
}


def server_classpath() -> str:
    """rocketmq-broker + rocketmq-namesrv 4.9.7 and their dependencies (raises jvm.Unavailable)."""
    return jvm.classpath(jvm.ROCKETMQ_BROKER, jvm.ROCKETMQ_NAMESRV)


def require_server_classpath() -> str:
    """server_classpath() for a test fixture: skips, saying why, only when the JDK or Maven is
    absent or the registry does not serve the broker/namesrv jars (jvm.require_classpath)."""
    return jvm.require_classpath(jvm.ROCKETMQ_BROKER, jvm.ROCKETMQ_NAMESRV)


class RocketMQHome:
    """A ROCKETMQ_HOME (and user.home) in ``root``: conf/ with the logback files, logs/."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self.logs = self.root / "logs"
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(exist_ok=True)
        for who in ("namesrv", "broker"):
            # each JVM names its own log file (-Dshmq.logFile): several share one home
            (conf / f"logback_{who}.xml").write_text(_LOGBACK.format(log="${shmq.logFile}"))

    def jvm_props(self) -> dict[str, str]:
        # Apache's disk guard (DefaultMessageStore: the JVM properties below, default 0.90 and
        # 0.85 of the whole partition) refuses every put with 14 once the partition is 90 % used,
        # however little the test stored; on a shared disk that happens, and every Apache-side
        # test then fails for a reason no test is about. 0.98 keeps the guard (a really full disk
        # still stops it) without tying the oracle to the neighbours' files.
        return {"user.home": str(self.root), "rocketmq.home.dir": str(self.root),
                "tls.server.mode": "disabled", "rocketmq.client.logRoot": str(self.logs),
                "rocketmq.client.logUseSlf4j": "true",
                "rocketmq.broker.diskSpaceWarningLevelRatio": "0.98",
                "rocketmq.broker.diskSpaceCleanForciblyRatio": "0.98"}

    def env(self) -> dict[str, str]:
        return dict(os.environ, ROCKETMQ_HOME=str(self.root))


def _port_free(port: int) -> bool:
    for host in ("127.0.0.1", "0.0.0.0"):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                return False
    return True


def free_port(span: tuple[int, ...] = (0,)) -> int:
    """A port p with p+d free for every d in ``span`` (the broker's triple is (-2, 0, 1))."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if min(span) + p > 1024 and max(span) + p < 65536 and all(_port_free(p + d) for d in span):
            return p
    raise RuntimeError("no free port (triple) found")


class JvmProc:
    """One started JVM: stopped by its pid only."""

    def __init__(self, popen: subprocess.Popen, addr: str, kind: str, out_path: Path):
        self.popen, self.pid, self.addr, self.kind, self.out_path = popen, popen.pid, addr, kind, out_path
        self.drain: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self.addr.rsplit(":", 1)[1])

    def alive(self) -> bool:
        return self.popen.poll() is None

    def output(self) -> str:
        try:
            return self.out_path.read_text(errors="replace")
        except OSError:
            return ""

    def stop(self, timeout: float = 40.0) -> int | None:
        """SIGTERM and wait: the JVM's shutdown hook flushes and deletes the abort file (a clean
        shutdown); SIGKILL only if it has not exited by ``timeout``."""
        if self.popen.poll() is None:
            try:
                os.kill(self.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait(10)
        if self.drain is not None:
            self.drain.join(10)  # it closes stdout at EOF
        elif self.popen.stdout is not None:
            self.popen.stdout.close()
        return self.popen.returncode


def _launch(main: str, conf_path: Path, home: RocketMQHome, heap: str, ready: str, addr: str,
            kind: str, timeout: float) -> JvmProc:
    props = {**home.jvm_props(), "shmq.logFile": str(home.logs / f"{conf_path.stem}.log")}
    cmd = jvm.java_command(main, server_classpath(), "-c", str(conf_path), heap=heap, props=props)
    cmd[1:1] = _JAVA17_OPENS
    out_path = conf_path.with_suffix(".out")
    with open(out_path, "wb") as out:
        popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=out, stdin=subprocess.DEVNULL,
                                 env=home.env(), start_new_session=True)
    proc = JvmProc(popen, addr, kind, out_path)
    pattern = re.compile(ready)
    sel = selectors.DefaultSelector()
    sel.register(popen.stdout, selectors.EVENT_READ)
    buf, deadline = b"", time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and popen.poll() is None:
            if not sel.select(max(0.0, deadline - time.monotonic())):
                continue
            chunk = os.read(popen.stdout.fileno(), 4096)
            if not chunk:
                break
            buf += chunk
            if pattern.search(buf.decode(errors="replace")):
                # the rest of its stdout goes where stderr goes
                proc.drain = _drain(popen, out_path)
                return proc
    finally:
        sel.close()
    proc.stop(5)
    raise RuntimeError(f"Apache RocketMQ {kind} not ready in {timeout}s: stdout={buf!r}\n"
                       f"stderr:\n{proc.output()[-3000:]}")


def _drain(popen: subprocess.Popen, out_path: Path) -> threading.Thread:
    def pump():
        with open(out_path, "ab") as f, popen.stdout:
            for line in popen.stdout:
                f.write(line)
                f.flush()
    t = threading.Thread(target=pump, daemon=True, name=f"drain-{popen.pid}")
    t.start()
    return t


def _write_conf(path: Path, conf: dict) -> Path:
    path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
    return path


def start_namesrv(home: RocketMQHome, timeout: float = 90.0) -> JvmProc:
    port = free_port()
    conf = _write_conf(home.root / f"namesrv-{port}.conf", {"listenPort": port})
    return _launch(NAMESRV_MAIN, conf, home, "128m", NAMESRV_READY, f"127.0.0.1:{port}", "namesrv", timeout)


def start_broker(home: RocketMQHome, namesrv_addr: str, store: Path, timeout: float = 120.0,
                 **conf) -> JvmProc:
    """A broker on ``store`` (storePathRootDir; commitlog under it) registered with ``namesrv_addr``;
    ``conf`` overrides broker.conf keys (brokerName defaults to one unique to this start)."""
    for attempt in range(3):
        port = free_port((-2, 0, 1))
        full = {**BROKER_DEFAULTS, "brokerName": f"apache-{port}", **conf, "namesrvAddr": namesrv_addr,
                "listenPort": port, "storePathRootDir": str(store),
                "storePathCommitLog": str(Path(store) / "commitlog")}
        path = _write_conf(home.root / f"broker-{port}.conf", full)
        try:
            proc = _launch(BROKER_MAIN, path, home, "256m", BROKER_READY, f"127.0.0.1:{port}", "broker", timeout)
        except RuntimeError as e:
            if "Address already in use" in str(e) and attempt < 2:
                continue  # another process took a port of the triple between the check and the bind
            raise
        proc.broker_name = full["brokerName"]
        proc.cluster = full["brokerClusterName"]
        wait_registered(namesrv_addr, proc.broker_name, proc.addr, timeout=60)
        return proc
    raise AssertionError("unreachable")


def wait_registered(namesrv_addr: str, broker_name: str, broker_addr: str, timeout: float = 60.0) -> None:
    """Until the NameServer's GET_BROKER_CLUSTER_INFO lists ``broker_name`` at ``broker_addr``."""
    from shmq.protocol import RequestCode, SyncRemotingClient, request
    from shmq.protocol.bodies import decode_json
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            with SyncRemotingClient(namesrv_addr, timeout=5) as c:
                r = c.invoke(request(RequestCode.GET_BROKER_CLUSTER_INFO))
            if r.code == 0 and r.body:
                info = decode_json(r.body, dict)
                addrs = (info.get("brokerAddrTable", {}).get(broker_name) or {}).get("brokerAddrs") or {}
                if broker_addr in {str(a) for a in addrs.values()}:
                    return
                last = info
        except OSError as e:  # connection errors while the NameServer starts
            last = e
        time.sleep(0.3)
    raise RuntimeError(f"broker {broker_name} at {broker_addr} not registered in {timeout}s: {last!r}")


# ---- the pair shared by every worker of one test run ----

def _run_id() -> str:
    # pytest-xdist gives every worker of one run the same id; a run without xdist is its own id
    return os.environ.get("PYTEST_XDIST_TESTRUNUID") or f"pid{os.getpid()}"


def _run_owner_pid() -> int:
    """The process whose end means the run is over: xdist's controller, or this process."""
    return os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()


@contextmanager
def _state_lock(state_dir: Path):
    state_dir.mkdir(parents=True, exist_ok=True)
    with open(state_dir / ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        yield


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True


#: Popen objects of the shared JVMs and their watchdog: they outlive the call that started them
#: (another worker may stop them), and must not be collected while running (ResourceWarning)
_KEEP: list = []


class SharedOracle:
    """The run's NameServer + broker (``.namesrv`` / ``.broker`` addresses, ``.broker_name``,
    ``.cluster``, ``.home``). Use as a context manager: entering registers this process as a user
    (starting the JVMs if nobody has), leaving unregisters it (the last user stops them)."""

    def __init__(self, base: Path | None = None):
        base = base or Path(tempfile.gettempdir())
        self.state_dir = base / f"shmq-oracle-{_run_id()}"
        self.state_file = self.state_dir / "state.json"

    def _read(self) -> dict | None:
        try:
            st = json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return None
        return st if all(_pid_alive(p) for p in st["pids"]) else None

    def __enter__(self) -> "SharedOracle":
        with _state_lock(self.state_dir):
            st = self._read()
            if st is None:
                self.state_dir.mkdir(parents=True, exist_ok=True)  # the last user may have removed it
                st = self._start()
            st["users"] = [u for u in st.get("users", []) if _pid_alive(u)] + [os.getpid()]
            self.state_file.write_text(json.dumps(st))
        self.namesrv, self.broker = st["namesrv"], st["broker"]
        self.broker_name, self.cluster = st["broker_name"], st["cluster"]
        self.home = Path(st["home"])
        self.store = Path(st["store"])
        return self

    def _start(self) -> dict:
        home = RocketMQHome(self.state_dir / "home")
        ns = start_namesrv(home)
        try:
            store = self.state_dir / "store"
            br = start_broker(home, ns.addr, store, brokerName="apache-oracle")
        except BaseException:
            ns.stop(10)
            raise
        pids = [ns.pid, br.pid]
        # if the whole run dies (kill -9 of pytest), this watchdog stops the JVMs it started
        _KEEP.extend((ns, br))
        _KEEP.append(subprocess.Popen([sys.executable, "-m", "tests.thirdparty.rocketmq_server", "watch",
                          str(_run_owner_pid()), str(self.state_file), *map(str, pids)],
                         cwd=str(Path(__file__).resolve().parents[2]), start_new_session=True,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return {"pids": pids, "namesrv": ns.addr, "broker": br.addr, "broker_name": br.broker_name,
                "cluster": br.cluster, "home": str(home.root), "store": str(store), "users": []}

    def __exit__(self, *exc) -> None:
        with _state_lock(self.state_dir):
            st = self._read()
            if st is None:
                return
            users = [u for u in st["users"] if _pid_alive(u)]
            if os.getpid() in users:
                users.remove(os.getpid())  # one entry: a process may have entered twice
            st["users"] = users
            if st["users"]:
                self.state_file.write_text(json.dumps(st))
                return
            self.state_file.unlink()
            _stop_pids(list(reversed(st["pids"])))
            # the whole state dir: a worker that waits on its lock now starts a new pair
            shutil.rmtree(self.state_dir, ignore_errors=True)


def _stop_pids(pids: list[int], timeout: float = 40.0) -> None:
    """SIGTERM each (broker first, so it unregisters), wait for the exit, SIGKILL on timeout."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + timeout
        while _pid_alive(pid) and time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    break
            except ChildProcessError:
                pass  # not our child (another worker started it): poll with kill 0
            time.sleep(0.2)
        if _pid_alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _watch(owner: int, state_file: str, pids: list[int]) -> None:
    """Runs detached: when ``owner`` is gone and the JVMs still run under this state file, stop them."""
    while _pid_alive(owner) and any(_pid_alive(p) for p in pids):
        time.sleep(1.0)
    if Path(state_file).exists():
        _stop_pids(list(reversed(pids)))
        try:
            os.unlink(state_file)
        except OSError:
            pass


if __name__ == "__main__":
    if len(sys.argv) >= 4 and sys.argv[1] == "watch":
        _watch(int(sys.argv[2]), sys.argv[3], [int(p) for p in sys.argv[4:]])
