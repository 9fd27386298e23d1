"""Java for the third-party tests: Maven classpaths, small harnesses compiled with javac, JVMs.

Nothing fetched is kept in the repository. Maven resolves artifacts into its own cache (~/.m2);
each resolved classpath and each compiled harness is kept under CACHE (outside the repository,
``SHMQ_THIRDPARTY_CACHE`` or ~/.cache/shmq-thirdparty), keyed by a hash of what made it, so a
second test run costs nothing. A file lock per entry lets pytest-xdist workers share them.

A test that needs Java calls :func:`require_java` (or catches :class:`Unavailable`) and skips
with the reason only when the JDK or Maven is absent or the registry refuses an artifact; any
other failure is an error of the test.
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

CACHE = Path(os.environ.get("SHMQ_THIRDPARTY_CACHE", Path.home() / ".cache" / "shmq-thirdparty"))
HERE = Path(__file__).resolve().parent

# Apache RocketMQ 4.9.8's broker and namesrv jars are refused by the registry reachable here;
# 4.9.7 is the newest 4.x server served (docs/compatibility.md says so). Clients and tools: 4.9.8.
ROCKETMQ_CLIENT = "org.apache.rocketmq:rocketmq-client:4.9.8"
ROCKETMQ_CLIENT_5 = "org.apache.rocketmq:rocketmq-client:5.3.1"
ROCKETMQ_TOOLS = "org.apache.rocketmq:rocketmq-tools:4.9.8"
ROCKETMQ_ACL = "org.apache.rocketmq:rocketmq-acl:4.9.8"
ROCKETMQ_SERVER_VERSION = "4.9.7"
ROCKETMQ_NAMESRV = f"org.apache.rocketmq:rocketmq-namesrv:{ROCKETMQ_SERVER_VERSION}"
ROCKETMQ_BROKER = f"org.apache.rocketmq:rocketmq-broker:{ROCKETMQ_SERVER_VERSION}"


class Unavailable(Exception):
    """Java, Maven or an artifact cannot be had on this machine; the text says which and why."""


def missing_tools() -> str | None:
    for tool in ("java", "javac", "mvn"):
        if shutil.which(tool) is None:
            return f"{tool} not found on PATH"
    return None


def require_java() -> None:
    reason = missing_tools()
    if reason:
        pytest.skip(f"Java tests need a JDK and Maven: {reason}")


def _key(*parts: str) -> str:
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


@contextmanager
def _locked(dirpath: Path):
    dirpath.mkdir(parents=True, exist_ok=True)
    with open(dirpath / ".lock", "w") as lk:
        fcntl.flock(lk, fcntl.LOCK_EX)
        yield


_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>shmq.thirdparty</groupId><artifactId>cp-{key}</artifactId><version>1</version>
  <packaging>pom</packaging>
  <dependencies>
{deps}
  </dependencies>
</project>
"""


def classpath(*artifacts: str) -> str:
    """The classpath (':'-joined jar paths) of ``group:artifact:version`` coordinates and all
    their runtime dependencies. Raises Unavailable when a tool is missing or Maven cannot
    resolve an artifact (the registry refused it)."""
    reason = missing_tools()
    if reason:
        raise Unavailable(reason)
    key = _key(*sorted(artifacts))
    d = CACHE / f"cp-{key}"
    out = d / "classpath.txt"
    with _locked(d):
        if out.exists() and all(Path(p).exists() for p in out.read_text().split(":") if p):
            return out.read_text().strip()
        deps = "\n".join(
            "    <dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>"
            .format(*a.split(":")) for a in artifacts)
        (d / "pom.xml").write_text(_POM.format(key=key, deps=deps))
        proc = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(d / "pom.xml"), "dependency:build-classpath",
             "-Dmdep.includeScope=runtime", f"-Dmdep.outputFile={out}"],
            capture_output=True, text=True, timeout=900)
        if proc.returncode != 0 or not out.exists():
            # the registry's address is not repeated in skip reasons or logs
            tail = re.sub(r"\w+://\S+", "<registry>", "\n".join((proc.stdout + proc.stderr).splitlines()[-15:]))
            raise Unavailable(f"Maven could not resolve {', '.join(artifacts)}:\n{tail}")
        return out.read_text().strip()


def compile_sources(sources: list[Path], cp: str) -> Path:
    """Compile ``sources`` against ``cp`` (once per content); returns the classes directory."""
    digest = _key(cp, *(Path(s).read_text() for s in sources))
    d = CACHE / f"classes-{digest}"
    with _locked(d):
        done = d / ".compiled"
        if not done.exists():
            proc = subprocess.run(
                ["javac", "-nowarn", "-encoding", "UTF-8", "-d", str(d), "-cp", cp, *map(str, sources)],
                capture_output=True, text=True, timeout=600)
            if proc.returncode != 0:
                raise RuntimeError(f"javac failed:\n{proc.stdout}\n{proc.stderr}")
            done.touch()
    return d


def java_command(main: str, cp: str, *args: str, heap: str = "128m",
                 props: dict[str, str] | None = None) -> list[str]:
    """A JVM command line: small heap, loopback only, no JIT warm-up tricks."""
    cmd = ["java", f"-Xms{heap}", f"-Xmx{heap}", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           "-Djava.net.preferIPv4Stack=true"]
    cmd += [f"-D{k}={v}" for k, v in (props or {}).items()]
    return cmd + ["-cp", cp, main, *args]


def harness_classpath(source: Path, *artifacts: str) -> str:
    """The classpath of one compiled Java harness on ``artifacts``, for a test fixture: the
    test skips, saying why, only when the JDK/Maven is absent or the registry refuses an
    artifact (never for a harness that fails to compile)."""
    cp = require_classpath(*artifacts)
    return f"{compile_sources([source], cp)}:{cp}"


def require_classpath(*artifacts: str) -> str:
    """``classpath(*artifacts)`` for a test fixture. With the JDK or Maven absent the test skips
    (require_java); with both there, Unavailable means Maven could not fetch an artifact, and
    the skip says which one and what the registry answered."""
    require_java()
    try:
        return classpath(*artifacts)
    except Unavailable as e:
        pytest.skip(f"Maven could not fetch {', '.join(artifacts)} (the registry refused or did not serve it): {e}")

