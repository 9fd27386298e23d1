"""What the shmq-bench tests share: ``env``, a bench Env (2 broker workers) whose temp files go
under the test's own tmp_path and which must leave nothing behind when closed, and
``check_intact``, the count-mode result every adapter must produce (all sent, all delivered
once, nothing corrupt, a latency sample per message). Test modules import both by name."""
from __future__ import annotations

import os

import pytest

from shmq.bench.services import Env


@pytest.fixture
def env(tmp_path, monkeypatch):
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    e = Env(workers=2)
    yield e
    e.close()
    assert not os.path.exists(e.root)


def check_intact(r, n):
    assert r.status == "ok", r.note
    assert r.sent == n and r.messages == n
    assert r.corrupt == 0 and r.duplicates == 0 and r.undelivered == 0
    assert r.latency_us is not None and r.latency_us["count"] == n
