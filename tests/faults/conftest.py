"""Fixtures of the disk-fault tests: a fault file the store's hook (shmq/store/faults.py) reads,
so a test makes the disk "full" or "failing" and later "free" while a broker runs."""
from __future__ import annotations

import os

import pytest

from shmq.store import faults


class FaultFile:
    """``SHMQ_FAULTS_FILE`` for this test: every process started from it (broker, workers,
    local clients) and this process itself read the rules from ``path``."""

    def __init__(self, path):
        self.path = str(path)

    def set(self, rules: str) -> None:
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write(rules)
        os.replace(tmp, self.path)  # a new inode: seen at the next hook call, never half-read

    def clear(self) -> None:
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


@pytest.fixture
def fault_file(tmp_path, monkeypatch):
    ff = FaultFile(tmp_path / "faults")
    monkeypatch.setenv("SHMQ_FAULTS_FILE", ff.path)
    faults.configure(file=ff.path)
    yield ff
    faults.configure()  # off again for the next test of this process
