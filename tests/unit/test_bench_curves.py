"""``shmq-bench curve <name>``: every registered curve runs at its two tiny points (--quick)
and produces a table, JSON (schema shmq-bench-curve/1) and a PNG with sane values, and
leaves nothing behind in its temp dir. No timed assertions: the figures are only checked
for being measured and consistent (MB/s = msgs/s x size, p50 <= p99)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("hdrh")

from shmq.bench import curves  # noqa: E402
from shmq.bench.curve_defs import fmt_bytes, parse_bytes  # noqa: E402
from shmq.bench.scenarios import Scenario  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_sizes_parse_and_print():
    assert [parse_bytes(t) for t in ("100", "4K", "4 KiB", "1M", "10G")] == [100, 4096, 4096, 1 << 20, 10 << 30]
    assert [fmt_bytes(n) for n in (100, 4096, 4 << 20, 10 << 30)] == ["100 B", "4 KiB", "4 MiB", "10 GiB"]
    with pytest.raises(ValueError):
        parse_bytes("4 parsecs")


def test_consumer_groups_split_consumers():
    sc = Scenario(consumers=5, groups=2)
    assert [sc.group_of(j) for j in range(5)] == [(0, 0, 3), (1, 0, 2), (0, 1, 3), (1, 1, 2), (0, 2, 3)]
    with pytest.raises(ValueError):
        Scenario(consumers=1, groups=2)


def test_a_failed_point_is_reported_not_fatal(tmp_path):
    def measure(ctx, series, x):
        if x == 2:
            raise RuntimeError("no broker")
        return curves.Point(series, x, str(x), msgs_per_s=10.0 * x, mb_per_s=0.001 * x, p50_us=1.0, p99_us=2.0)
    spec = curves.CurveSpec("t", "a test curve", "x", (1, 2, 3), (1, 2), measure)
    rep = curves.run(spec, curves.CurveContext(env=None), [1, 2, 3], ["local"])
    assert [p.status for p in rep.points] == ["ok", "error", "ok"]
    text = curves.render(rep)
    assert "| local | 3 | 30.0 |" in text and "error: RuntimeError: no broker" in text
    curves.write_json(rep, str(tmp_path / "t.json"))
    assert json.loads((tmp_path / "t.json").read_text())["points"][1]["note"] == "RuntimeError: no broker"


def _check_point(spec, p):
    assert p["status"] == "ok", f"{p['series']} {p['label']}: {p['status']}: {p.get('note')}"
    for key, _ in spec.columns:
        v = p[key] if key in p else p["extra"].get(key)
        if key in ("msgs_per_s", "mb_per_s", "gb_per_s") or key.endswith(("rss_mib", "pss_mib")):
            assert v is not None and v > 0, (key, p)
    if spec.name == "size":
        assert p["mb_per_s"] == pytest.approx(p["msgs_per_s"] * p["x"] / 1e6)
    if spec.name == "conn-memory":
        assert p["extra"]["accepted"] >= p["x"]
    if spec.name == "queue-memory":  # sparse ConsumeQueue files may take ~0 blocks
        assert p["extra"]["cq_disk_mib"] >= 0
    if spec.name == "groups":
        assert p["extra"]["per_group"] * p["x"] == pytest.approx(p["msgs_per_s"])
    if p["p50_us"] is not None and p["p99_us"] is not None:
        assert 0 < p["p50_us"] <= p["p99_us"], p


@pytest.mark.timeout(240)
@pytest.mark.parametrize("name", sorted(curves.all_curves()))
def test_each_curve_quick(tmp_path, name):
    spec = curves.get(name)
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = dict(os.environ, TMPDIR=str(tmp), SHMQ_BENCH_QUICK="1")
    p = subprocess.run([sys.executable, "-m", "shmq.cli.bench", "curve", name, "--out", str(tmp_path),
                        "--no-progress"], cwd=REPO, env=env, capture_output=True, text=True, timeout=220)
    assert p.returncode == 0, p.stdout + p.stderr
    assert f"# shmq-bench curve {name}:" in p.stdout and "load average" in p.stdout
    report = json.loads((tmp_path / f"curve-{name}.json").read_text())
    assert report["schema"] == curves.SCHEMA and report["curve"] == name and not report["interrupted"]
    pts = report["points"]
    assert sorted({pt["x"] for pt in pts}) == sorted(spec.quick), p.stdout
    assert len(pts) >= 2 * len(spec.series), p.stdout  # a measure may give several series at once
    for pt in pts:
        _check_point(spec, pt)
        assert f"| {pt['series']} | {pt['label']} |" in p.stdout
    png = (tmp_path / f"curve-{name}.png").read_bytes()
    assert png[:4] == b"\x89PNG" and len(png) < 200_000
    assert list(tmp.iterdir()) == []  # every store and server directory removed
