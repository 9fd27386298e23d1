"""A worker started after its supervisor died (a kill -9 of the supervisor racing a worker
restart, as ``shmq chaos`` does) exits with one clear line and status 1, not a traceback."""
from __future__ import annotations

import os
import subprocess
import sys

from shmq.broker.shared.config import BrokerConfig

from ..conftest import REPO


def test_worker_without_a_supervisor_exits_cleanly(tmp_path):
    cfg = BrokerConfig()
    cfg.update({"storePathRootDir": str(tmp_path / "store"), "controlSocket": str(tmp_path / "gone.sock")})
    env = dict(os.environ, SHMQ_BROKER_CONFIG=cfg.to_json(), SHMQ_WORKER_ID="1")
    p = subprocess.run([sys.executable, "-m", "shmq.broker.worker.main"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 1, p.stderr
    assert "no supervisor at" in p.stderr and "Traceback" not in p.stderr, p.stderr
