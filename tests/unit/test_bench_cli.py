"""``shmq-bench`` with no scenario, in its short mode (--quick / SHMQ_BENCH_QUICK=1): the
whole standard suite with every peer finishes, prints one table, writes JSON and a plot,
and leaves no process, shared-memory segment or temporary directory behind."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import psutil
import pytest

pytest.importorskip("hdrh")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def tagged_processes(tag: str) -> list[psutil.Process]:
    out = []
    for p in psutil.process_iter():
        try:
            if p.environ().get("SHMQ_BENCH_TEST_TAG") == tag:
                out.append(p)
        except (psutil.Error, OSError):
            pass
    return out


@pytest.mark.timeout(280)
def test_no_argument_run_quick_cleans_up(tmp_path):
    tag = uuid.uuid4().hex
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    out_json, out_png = tmp_path / "r.json", tmp_path / "r.png"
    env = dict(os.environ, TMPDIR=str(tmp), SHMQ_BENCH_QUICK="1", SHMQ_BENCH_TEST_TAG=tag)
    p = subprocess.run([sys.executable, "-m", "shmq.cli.bench", "--json", str(out_json), "--plot", str(out_png)],
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=260)
    assert p.returncode == 0, p.stdout + p.stderr
    text = p.stdout
    for row in ("shmq-store", "mp.Queue", "faster-fifo", "pyzmq", "redis"):
        assert f"| {row} |" in text, text
    for scenario in ("produce local", "produce tcp", "e2e local", "e2e tcp", "sync-flush local"):
        assert f"| {scenario} |" in text
    assert text.count("\n| ") >= 1 + 5 * 6  # header + every scenario x every row

    report = json.loads(out_json.read_text())
    assert report["schema"] == "shmq-bench/1" and not report["interrupted"]
    by = {(r["scenario"]["kind"], r["scenario"]["transport"], r["peer"]): r for r in report["results"]}
    assert by[("produce", "local", "shmq-store")]["status"] == "ok"
    assert by[("e2e", "local", "shmq-store")]["latency_us"]["count"] > 0
    assert out_png.read_bytes()[:4] == b"\x89PNG"

    # nothing left behind: processes (by pid and by the inherited tag), segments, directories
    inv = report["cleanup"]
    assert inv["pids"], "the run started processes"
    for pid in inv["pids"]:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE or \
            psutil.Process(pid).environ().get("SHMQ_BENCH_TEST_TAG") != tag
    assert tagged_processes(tag) == []
    for seg in inv["segments"]:
        assert not os.path.exists("/dev/shm" + seg), seg
    for d in inv["dirs"]:
        assert not os.path.exists(d), d
    assert list(tmp.iterdir()) == []
