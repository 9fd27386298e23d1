"""The chaos run's cycle plan: the first cycles kill every enabled target once whatever the
time budget (a CI run on a loaded machine spent its 20 s on four restarts and never killed
the producer, so it proved nothing of it); the budget and the cycle count end the rest."""
from __future__ import annotations

import random
import time
from types import SimpleNamespace

from shmq.chaos import run


def _plan(monkeypatch, opts, cycle_s=0.0, slaves=1):
    def one(cluster, actors, target, rng):
        time.sleep(cycle_s)
        return {"target": target}
    monkeypatch.setattr(run, "_one", one)
    cluster = SimpleNamespace(slaves=["s"] * slaves)
    actors = SimpleNamespace(replace_crashed=lambda: None)
    return [c["target"] for c in run._cycles(cluster, actors, opts, random.Random(7))]


def test_every_target_is_killed_once_though_the_budget_is_spent(monkeypatch):
    opts = run.Options(cycles=6, seconds=0.05, pause=(0, 0))
    got = _plan(monkeypatch, opts, cycle_s=0.03)
    assert sorted(got) == sorted(run.DEFAULT_MIX)  # five targets, then the budget ended it


def test_the_budget_and_the_count_end_the_weighted_cycles(monkeypatch):
    got = _plan(monkeypatch, run.Options(cycles=9, seconds=30, pause=(0, 0)))
    assert len(got) == 9 and set(got) == set(run.DEFAULT_MIX)
    got = _plan(monkeypatch, run.Options(cycles=3, seconds=30, pause=(0, 0)))
    assert len(got) == 3 and len(set(got)) == 3  # a count below the targets cuts the first round
    got = _plan(monkeypatch, run.Options(cycles=20, seconds=0.05, pause=(0, 0)), cycle_s=0.03, slaves=0)
    assert sorted(got) == sorted(t for t in run.DEFAULT_MIX if t != "slave")
