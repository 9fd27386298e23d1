"""shmq-bench results: the JSON schema (shmq-bench/1), the table and the plot, from synthetic
child reports (no processes, no timing)."""
from __future__ import annotations

import json

import pytest

pytest.importorskip("hdrh")

from shmq.bench import histogram, runner
from shmq.bench.engine import summarize
from shmq.bench.scenarios import SCHEMA, Result, Scenario, make

GO = 10**12


def reports(sc: Scenario, sent: int, lat_ns: int, cpu: float = 0.5) -> list[dict]:
    rec = histogram.LatencyRecorder()
    for k in range(sent):
        rec.add(lat_ns + k)
    return [
        {"role": "producer", "idx": 0, "sent": sent, "sent_window": sent, "end_ns": GO + 10**9, "cpu_s": cpu,
         "start_ns": GO},
        {"role": "consumer", "idx": 0, "received": sent, "in_window": sent, "duplicates": 0, "corrupt": 0,
         "first_ns": GO + 1000, "last_ns": GO + 10**9, "histogram": rec.encode(), "cpu_s": cpu, "start_ns": GO},
    ]


def sample_report() -> runner.Report:
    thr = make("produce", duration=1.0)
    lat = make("e2e", duration=1.0)
    rep = runner.Report([thr, lat])
    for name, n, ns in (("shmq", 2000, 5_000), ("shmq-store", 3000, 3_000), ("pyzmq", 1000, 60_000)):
        rep.results.append(summarize(name, thr, reports(thr, n, ns), 0.1))
        rep.results.append(summarize(name, lat, reports(lat, n, ns), None))
    rep.results.append(Result.skipped("redis", thr, "redis-server not found"))
    rep.notes.append("synthetic")
    return rep


def test_summarize_figures():
    sc = make("produce", duration=1.0)
    r = summarize("x", sc, reports(sc, 1000, 50_000, cpu=0.002), 0.001)
    assert r.status == "ok" and r.sent == r.messages == 1000
    assert r.msgs_per_s == pytest.approx(1000.0) and r.mb_per_s == pytest.approx(0.1)
    assert r.latency_us["count"] == 1000 and 49 <= r.latency_us["p50"] <= 51
    assert r.cpu_us_per_msg == {"producer": 2.0, "consumer": 2.0, "broker": 1.0}


def test_summarize_reports_errors_and_missing():
    sc = make("produce", duration=1.0)
    r = summarize("x", sc, [{"role": "producer", "idx": 0, "error": "boom"}], None)
    assert r.status == "error" and "boom" in r.note and r.msgs_per_s is None
    assert not r.ok


def test_json_schema(tmp_path):
    rep = sample_report()
    path = tmp_path / "r.json"
    runner.write_json(rep, str(path))
    d = json.loads(path.read_text())
    assert d["schema"] == SCHEMA
    assert set(d) >= {"schema", "date", "command", "machine", "elapsed_s", "interrupted", "scenarios", "results",
                      "notes", "cleanup"}
    assert set(d["machine"]) >= {"nproc", "cpu", "python", "system"}
    for s in d["scenarios"]:
        assert set(s) >= {"kind", "transport", "size", "batch", "producers", "consumers", "rate", "duration",
                          "warmup", "count", "label"}
    for r in d["results"]:
        assert set(r) >= {"peer", "scenario", "status", "note", "messages", "sent", "seconds", "msgs_per_s",
                          "mb_per_s", "send_msgs_per_s", "latency_us", "histogram", "ack_latency_us", "cpu_us_per_msg",
                          "undelivered", "duplicates", "corrupt"}
        assert r["status"] in ("ok", "skipped", "error", "interrupted")
        if r["status"] == "ok":
            assert isinstance(r["msgs_per_s"], float)
            assert set(r["latency_us"]) == {"p50", "p90", "p99", "p99.9", "p99.99", "max", "mean", "count"}
            assert histogram.decode(r["histogram"]).get_total_count() == r["latency_us"]["count"]
    back = runner.load_json(str(path))
    assert [r.peer for r in back.results] == [r.peer for r in rep.results]
    assert back.results[0].scenario == rep.results[0].scenario


def test_table_ratios():
    text = runner.render(sample_report())
    lines = text.splitlines()
    zmq_thr = next(ln for ln in lines if "| produce local | pyzmq |" in ln)
    assert "| shmq 2.00x, store 3.00x |" in zmq_thr  # 2,000/s and 3,000/s over pyzmq 1,000/s
    zmq_lat = next(ln for ln in lines if "| e2e local | pyzmq |" in ln)
    assert "shmq p50 0.10x" in zmq_lat  # ~6 µs over ~60.5 µs
    assert "skipped: redis-server not found" in text


def test_plot_writes_png(tmp_path):
    pytest.importorskip("matplotlib")
    from shmq.bench import plot
    out = tmp_path / "r.png"
    plot.write(sample_report(), str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_scenario_validation():
    with pytest.raises(ValueError):
        Scenario(kind="nope")
    with pytest.raises(ValueError):
        Scenario(size=8)
    with pytest.raises(ValueError):
        make("pull", count=0)
    assert make("sync-flush").producers == 4 and make("e2e").rate == 10_000
