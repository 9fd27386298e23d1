"""A real full disk, not the fault hook: the broker runs in its own user + mount namespace
(``unshare -rm``) on a tmpfs of a few MiB; the test fills that filesystem (reached through
/proc/<pid>/root) until the next CommitLog file cannot be allocated, checks the clean refusal,
that nothing refused was stored and that the broker survives (no SIGBUS: files are allocated
whole before they are mapped), then frees the space and sends again. Skipped, with the reason,
where the machine does not allow unprivileged namespaces."""
from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import time

import pytest

from shmq.protocol import SyncRemotingClient

from ..integration.broker_helpers import BROKER_READY, TEST_SETTINGS, create_topic, send
from ..integration.conftest import processes, start_process  # noqa: F401
from .helpers import drain

FILE = 256 * 1024
BODY = 8 * 1024
SETTINGS = {**TEST_SETTINGS, "mappedFileSizeCommitLog": FILE, "mappedFileSizeConsumeQueue": 1000 * 20,
            "maxHashSlotNum": 1024, "maxIndexNum": 4096, "timerWheelEnable": "false",
            "diskMaxUsedSpaceRatio": 100, "brokerName": "tmpfs-broker"}


def _namespaces_or_skip(tmp_path) -> None:
    if shutil.which("unshare") is None:
        pytest.skip("no unshare(1) on this machine")
    probe = tmp_path / "probe"
    probe.mkdir()
    r = subprocess.run(["unshare", "-rm", "sh", "-c", f"mount -t tmpfs -o size=1m tmpfs {probe}"],
                       capture_output=True, text=True, timeout=10)
    if r.returncode != 0:
        pytest.skip(f"user + mount namespaces are not allowed here: {r.stderr.strip()}")


class NamespacedBroker:
    def __init__(self, proc, mnt):
        self.proc = proc
        self.addr = f"127.0.0.1:{int(proc.match.group(1))}"
        self.seen = f"/proc/{proc.pid}/root{mnt}"      # the broker's tmpfs, from outside its namespace
        self.filler = f"{self.seen}/filler"

    def fill(self, leave: int = 0) -> None:
        """Fill the broker's filesystem until at most ``leave`` bytes are free (greedily, in
        shrinking steps: the broker may be allocating a file at the same moment)."""
        step = 1 << 20
        with open(self.filler, "ab") as f:
            while step >= 4096:
                st = os.statvfs(self.seen)
                room = st.f_bavail * st.f_frsize - leave
                if room < 4096:
                    return
                try:
                    os.posix_fallocate(f.fileno(), os.fstat(f.fileno()).st_size, min(step, room))
                except OSError as e:
                    if e.errno != errno.ENOSPC:
                        raise
                    step //= 2

    def free(self) -> None:
        os.unlink(self.filler)


@pytest.fixture
def tmpfs_broker(processes, tmp_path):
    _namespaces_or_skip(tmp_path)
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    argv = [sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(mnt / "store"), "--workers", "1"]
    for k, v in SETTINGS.items():
        argv += ["--set", f"{k}={v}"]
    script = f"mount -t tmpfs -o size=4m tmpfs {mnt} && exec \"$@\""
    proc = start_process(["unshare", "-rm", "sh", "-c", script, "sh", *argv], BROKER_READY,
                         tmp_path / "broker.log", env=dict(os.environ, SHMQ_LOG_LEVEL="INFO"))
    processes.append(proc)
    br = NamespacedBroker(proc, mnt)
    assert os.path.isdir(f"{br.seen}/store/commitlog")
    yield br
    assert proc.alive(), f"the broker died (exit {proc.popen.poll()}):\n{proc.log()[-3000:]}"   # no SIGBUS
    time.sleep(0.2)
    log = proc.log()
    assert "Traceback" not in log, log[max(0, log.find("Traceback") - 1500):][:4000]


def test_a_full_tmpfs_refuses_the_next_commitlog_file_cleanly_and_recovers(tmpfs_broker):
    br = tmpfs_broker
    acked: list[bytes] = []
    with SyncRemotingClient(br.addr, timeout=10) as c:
        assert create_topic(c, "RT", queues=1).code == 0
        assert send(c, "RT", b"first").code == 0
        acked.append(b"first")
        br.fill(leave=FILE // 2)                           # less room than one more CommitLog file
        refused = None
        for i in range(4 * FILE // BODY):
            b = b"%05d" % i + os.urandom(BODY)
            r = send(c, "RT", b)
            if r.code != 0:
                refused = r
                break
            acked.append(b)
        assert refused is not None, "the tmpfs never ran full"
        assert refused.code == 14 and "disk is full" in refused.remark, (refused.code, refused.remark)
        assert drain(c, "RT") == acked
        br.free()                                          # space returns
        r = send(c, "RT", b"after")
        assert r.code == 0, r.remark
        acked.append(b"after")
        assert drain(c, "RT") == acked


def test_a_full_tmpfs_refuses_a_new_queues_first_entry_cleanly_and_recovers(tmpfs_broker):
    br = tmpfs_broker
    with SyncRemotingClient(br.addr, timeout=10) as c:
        assert create_topic(c, "RQ", queues=2).code == 0
        assert send(c, "RQ", b"q0-first", queue_id=0).code == 0
        br.fill()                                          # not one block left
        r = send(c, "RQ", b"q1-refused", queue_id=1)       # queue 1 has no ConsumeQueue space yet
        assert r.code == 14 and "disk is full" in r.remark, (r.code, r.remark)
        assert send(c, "RQ", b"q0-second", queue_id=0).code == 0   # queue 0 and the CommitLog have room
        br.free()
        assert send(c, "RQ", b"q1-after", queue_id=1).code == 0
        assert drain(c, "RQ", 0) == [b"q0-first", b"q0-second"]
        assert drain(c, "RQ", 1) == [b"q1-after"]
