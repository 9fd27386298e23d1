"""``shmq chaos`` end to end at CI size, and its checker on made-up files (so a chaos tool
that stopped noticing loss could not pass).

The run: both flush modes, every kill target at least once (producers, a worker, the
supervisor alone, the whole broker), TCP and local producers and consumers all the time;
nothing acknowledged lost, nothing garbled served, every consumer group got everything,
the store verifies, the broker always came back. The long run is in bench/RESULTS.md."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from shmq.chaos import check
from shmq.chaos.ledger import AppendLog, read_lines, received
from shmq.chaos.payload import body_for, parse

from ..conftest import REPO

pytestmark = pytest.mark.crash

BROKER_SIDE = {"worker", "supervisor", "broker"}


def test_chaos_both_flush_modes(tmp_path):
    out = tmp_path / "chaos.json"
    argv = [sys.executable, "-m", "shmq.cli.main", "chaos", "--cycles", "6", "--seconds", "20", "--flush", "both",
            "--mix", "producer=2,worker=2,supervisor=1,broker=1", "--json", str(out)]
    p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    lines = [l for l in p.stdout.splitlines() if l.startswith("shmq chaos ")]
    assert len(lines) == 2 and all(l.endswith(")") and ": OK (seed" in l for l in lines), p.stdout
    runs = json.loads(out.read_text())["runs"]
    assert [r["flush"] for r in runs] == ["ASYNC_FLUSH", "SYNC_FLUSH"]
    for r in runs:
        assert r["cycles"] >= 4, r                       # every target once, at least
        assert BROKER_SIDE | {"producer"} <= set(r["targets"]), r["targets"]
        assert r["acked"] > 0
        assert r["acked_lost"] == 0 and r["recovered"] == r["acked"], r["lost_sample"]
        assert r["garbage"] == 0
        assert r["store_verified"], r["store_problems"]
        assert all(g["missing"] == 0 and g["received"] >= r["acked"] for g in r["consumers"].values()), r["consumers"]
        assert r["unserved_cycles"] == 0 and r["restarted_serving"]
        assert r["client_crashes"] == 0
        rec = r["recovery_ms"]
        assert rec["all"]["n"] == sum(r["targets"].get(t, 0) for t in BROKER_SIDE)
        assert 0 < rec["all"]["p50"] <= rec["all"]["max"]


def test_chaos_sync_master_and_slave(tmp_path):
    """SYNC_MASTER with one slave: the slave is a kill target too, and after the run it holds
    every acknowledged message (SEND_OK waited for it)."""
    out = tmp_path / "chaos.json"
    argv = [sys.executable, "-m", "shmq.cli.main", "chaos", "--cycles", "6", "--seconds", "20", "--flush",
            "SYNC_FLUSH", "--slaves", "1", "--json", str(out)]
    p = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    (r,) = json.loads(out.read_text())["runs"]
    assert r["master_role"] == "SYNC_MASTER" and BROKER_SIDE | {"producer", "slave"} <= set(r["targets"])
    assert r["acked"] > 0 and r["acked_lost"] == 0 and r["garbage"] == 0 and r["store_verified"]
    assert r["slaves_missing"] == {"slave1": 0}
    assert all(g["missing"] == 0 for g in r["consumers"].values())


def test_checker_fails_a_sync_master_run_whose_slave_lacks_an_acked_message():
    rep = check.report(["a.0.1"], [body_for("a.0.1")], {"tcp": ["a.0.1"]}, [])
    rep.update(master_role="SYNC_MASTER", slaves_missing={"slave1": 1})
    assert not check.ok(rep)
    rep.update(master_role="ASYNC_MASTER")            # an async slave may lag: reported only
    assert check.ok(rep)


def _ids(n: int, prefix: str = "L0.0") -> list[str]:
    return [f"{prefix}.{i}" for i in range(n)]


def test_checker_counts_an_acked_id_missing_from_the_store_as_lost():
    acked = _ids(100)
    drained = [body_for(i) for i in acked if i != "L0.0.37"]
    deliveries = {"tcp": acked, "local": acked}
    rep = check.report(acked, drained, deliveries, [{"target": "producer"}])
    assert rep["acked_lost"] == 1 and rep["lost_sample"] == ["L0.0.37"]
    assert rep["recovered"] == 99
    assert not check.ok(rep)
    assert "acked-lost 1" in check.summary(rep) and check.summary(rep).endswith("FAILED")


def test_checker_counts_garbage_in_the_store_and_at_consumers():
    acked = _ids(10)
    torn = bytearray(body_for(acked[3]))
    torn[len(torn) // 2] ^= 0x01                     # one flipped bit
    drained = [body_for(i) for i in acked] + [bytes(torn), b"", b"\x00" * 40]
    rep = check.report(acked, drained, {"tcp": acked + ["G T0.0.5"]}, [])
    assert rep["garbage"] == 4 and rep["acked_lost"] == 0
    assert not check.ok(rep)


def test_checker_counts_duplicates_unacked_and_consumer_misses_apart():
    acked = _ids(10)
    drained = [body_for(i) for i in acked] + [body_for(acked[0]), body_for("T0.1.0")]
    rep = check.report(acked, drained, {"tcp": acked, "local": acked[:9] + acked[:2]}, [])
    assert (rep["duplicates"], rep["stored_unacked"], rep["acked_lost"]) == (1, 1, 0)
    assert rep["consumers"]["local"] == {"received": 9, "missing": 1, "redelivered": 2}
    assert not check.ok(rep)                         # a consumer group that never got one fails
    rep = check.report(acked, drained, {"tcp": acked}, [])
    assert check.ok(rep)


def test_checker_recovery_percentiles():
    cycles = [{"target": "worker", "recovery_ms": v} for v in (100.0, 300.0, 200.0)] + \
             [{"target": "broker", "recovery_ms": 900.0}, {"target": "producer"}]
    r = check.recovery(cycles)
    assert r["worker"] == {"n": 3, "p50": 200.0, "max": 300.0}
    assert r["all"] == {"n": 4, "p50": 300.0, "max": 900.0}


def test_payload_names_its_id_and_detects_any_change():
    b = body_for("L3.2.17")
    assert parse(b) == ("L3.2.17", True)
    assert parse(body_for("L3.2.18"))[1] and body_for("L3.2.18") != b
    assert parse(b[:-1]) == ("L3.2.17", False)
    assert parse(b"L3.2.17|x|00000000") == ("L3.2.17", False)
    assert parse(b"no separator") == (None, False)
    assert parse(b"\xff\xfe|abc") == (None, False)


def test_ledger_drops_a_line_torn_by_a_kill(tmp_path):
    log = AppendLog(tmp_path / "a.log")
    log.add("L0.0.1")
    log.add("L0.0.2")
    log.close()
    with open(tmp_path / "a.log", "ab") as f:
        f.write(b"L0.0.")                            # the write a kill cut short
    assert read_lines(tmp_path) == ["L0.0.1", "L0.0.2"]
    got, garbage = received(["a", "G b", "a", ""])
    assert got == {"a": 2} and garbage == 1
    os.remove(tmp_path / "a.log")
    assert read_lines(tmp_path) == []
