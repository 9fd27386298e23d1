"""The Java and Go programs of the third-party tests, built once and run against a broker.

* :func:`java_scenarios` runs ``java/Harness.java`` (rocketmq-client 4.9.8) with several named
  scenarios in one JVM and returns ``{scenario: result}`` from its JSON lines;
* :func:`java_member` starts one Java push consumer of a group (``Harness member``), which
  prints what it is allocated and what it receives, for the mixed Java/Python group test;
* :class:`MqAdmin` keeps one JVM running ``java/Admin.java`` (rocketmq-tools 4.9.8) and runs
  mqadmin commands in it one after another, returning each command's output;
* :func:`go_binary` builds ``go/main.go`` (rocketmq-client-go v2) into the cache.

Everything fetched or built lives in :data:`jvm.CACHE` (outside the repository). The
builders raise :class:`jvm.Unavailable` (the test skips with its reason) only when a tool is
missing or a registry refuses; :func:`build_all` does all of it ahead of pytest (warmup.py,
which ``scripts/test`` runs) so no test waits for the first download.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

from . import jvm

JAVA_DIR = jvm.HERE / "java"
GO_DIR = jvm.HERE / "go"


def _client_cp() -> str:
    return jvm.classpath(jvm.ROCKETMQ_CLIENT)


def _tools_cp() -> str:
    return jvm.classpath(jvm.ROCKETMQ_TOOLS)


def harness_cp() -> str:
    cp = _client_cp()
    return f"{jvm.compile_sources([JAVA_DIR / 'Harness.java'], cp)}:{cp}"


def admin_cp() -> str:
    cp = _tools_cp()
    return f"{jvm.compile_sources([JAVA_DIR / 'Admin.java'], cp)}:{cp}"


def _client_props(log_dir: Path) -> dict[str, str]:
    # the client's own log files go to the test's temp dir, not ~/logs; so do a broadcasting
    # consumer's offsets (LocalFileOffsetStore, else ~/.rocketmq_offsets/<clientId>/<group>,
    # which the next run, with the same names, would start from)
    return {"rocketmq.client.logRoot": str(log_dir), "rocketmq.client.logLevel": "WARN",
            "rocketmq.client.localOffsetStoreDir": str(log_dir / "offsets")}


def java_scenarios(namesrv: str, prefix: str, scenarios: list[str], log_dir: Path,
                   timeout: float = 240.0) -> dict[str, dict]:
    cmd = jvm.java_command("Harness", harness_cp(), namesrv, prefix, *scenarios, props=_client_props(log_dir))
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            results[r["scenario"]] = r
    missing = [s for s in scenarios if s not in results]
    assert not missing, f"Harness exited {proc.returncode} without {missing}\nstderr:\n{proc.stderr[-4000:]}"
    return results


def java_member_argv(namesrv: str, topic: str, group: str, instance: str, log_dir: Path) -> list[str]:
    return jvm.java_command("Harness", harness_cp(), "member", namesrv, topic, group, instance,
                            props=_client_props(log_dir))


class MqAdmin:
    """One JVM running mqadmin commands on request: ``run("topicList", "-n", addr)`` returns
    what the command printed (stdout and stderr together, as a user sees it)."""

    def __init__(self, log_dir: Path):
        log_dir.mkdir(parents=True, exist_ok=True)
        cmd = jvm.java_command("Admin", admin_cp(), str(log_dir), heap="192m", props=_client_props(log_dir))
        with open(log_dir / "admin-jvm.log", "wb") as err:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True)

    def run(self, *args: str, timeout: float = 60.0) -> str:
        assert self.proc.poll() is None, "the mqadmin JVM has exited"
        self.proc.stdin.write(json.dumps(list(args)) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()  # the wrapper answers every command with one line
        assert line, f"the mqadmin JVM ended during {args}"
        return json.loads(line)["out"]

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc.stdout.close()


def go_binary() -> Path:
    """``go build`` of go/ (module cache: GOMODCACHE, ~/go by default) into the cache."""
    go = shutil.which("go")
    if go is None:
        raise jvm.Unavailable("go not found on PATH")
    src = [GO_DIR / "go.mod", GO_DIR / "main.go"] + ([GO_DIR / "go.sum"] if (GO_DIR / "go.sum").exists() else [])
    key = jvm._key(*(p.read_text() for p in src))
    d = jvm.CACHE / f"go-{key}"
    out = d / "shmq-go-harness"
    with jvm._locked(d):
        if not out.exists():
            # go.sum is committed (hashes only): the build verifies against it and changes nothing
            env = dict(os.environ, GOFLAGS="-mod=readonly -buildvcs=false", CGO_ENABLED="0")
            proc = subprocess.run([go, "build", "-o", str(out), "."], cwd=GO_DIR, capture_output=True,
                                  text=True, timeout=900, env=env)
            if proc.returncode != 0:
                text = proc.stdout + proc.stderr
                if "go.mod" not in text and ("dial" in text or "404" in text or "403" in text or "refused" in text):
                    raise jvm.Unavailable("the Go module proxy refused rocketmq-client-go: " + text[-800:])
                raise RuntimeError(f"go build failed:\n{text}")
    return out


def build_all() -> None:
    """Build the harnesses ahead of the tests, saying what it does (warmup.py, from scripts/test)."""
    steps = [("rocketmq-client 4.9.8 + Harness.java", harness_cp, JAVA_DIR / "Harness.java"),
             ("rocketmq-tools 4.9.8 + Admin.java", admin_cp, JAVA_DIR / "Admin.java"),
             ("rocketmq-client-go v2 harness", go_binary, GO_DIR / "main.go")]
    for what, step, source in steps:
        if not source.exists():
            continue
        t0 = time.monotonic()
        print(f"third-party warm-up: {what} ...", flush=True)
        try:
            step()
        except jvm.Unavailable as e:
            print(f"third-party warm-up: {what} unavailable, its tests will skip: {str(e).splitlines()[0]}", flush=True)
            continue
        print(f"third-party warm-up: {what} ready ({time.monotonic() - t0:.0f} s)", flush=True)
