"""The headline's ``send_async`` row (bench/tcp_paths.py ``async_sends``) measures what a user's loop
does: every send waited for before the clock stops, never more than the window in flight, and
the harness's own work a message no more than a plain loop's (no clock read a message)."""
from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _tcp_paths():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("tcp_paths_under_test", ROOT / "bench" / "tcp_paths.py")
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        sys.path.remove(str(ROOT / "bench"))


class _Future:
    def __init__(self, log):
        self.log, self.waited = log, False

    def result(self, timeout=None):
        self.waited = True
        self.log["open"] -= 1


class _Producer:
    def __init__(self):
        self.log = {"open": 0, "most": 0, "sent": []}

    def send_async(self, msg):
        f = _Future(self.log)
        self.log["open"] += 1
        self.log["most"] = max(self.log["most"], self.log["open"])
        self.log["sent"].append(f)
        return f


def test_every_send_is_waited_for_within_the_window(monkeypatch):
    tp = _tcp_paths()
    clock_reads = [0]
    real = time.perf_counter

    def counted():
        clock_reads[0] += 1
        return real()
    monkeypatch.setattr(tp.time, "perf_counter", counted)
    p = _Producer()
    rate = tp.async_sends(p, "T", 0.05, window=50)
    sent = p.log["sent"]
    assert rate > 0 and len(sent) >= 100
    assert all(f.waited for f in sent) and p.log["open"] == 0
    assert p.log["most"] <= 50
    assert clock_reads[0] <= len(sent) // 100 + 3  # one read a hundred sends, not one a send
