"""The short fuzz run of CI: every target of targets.py under atheris (coverage-guided), from
its seeds, 10,000 inputs each, with libFuzzer's RSS limit (memory must stay bounded). The long
run (10^6 inputs per target) and its figures are in bench/RESULTS.md. Inputs that once
crashed a decoder are kept below as regression cases."""
from __future__ import annotations

import base64
import subprocess
import sys

import pytest

from tests.conftest import REPO
from tests.fuzz import targets
from tests.fuzz.run import NAMES

SHORT_RUNS = 10_000


def test_names_match_targets():
    assert set(NAMES) == set(targets.TARGETS)


@pytest.mark.parametrize("name", NAMES)
def test_short_fuzz_run(name, tmp_path):
    pytest.importorskip("atheris", reason="atheris is a test dependency (pyproject.toml): reinstall with scripts/test")
    r = subprocess.run([sys.executable, "-m", "tests.fuzz.run", name, f"-runs={SHORT_RUNS}", "-max_len=2048",
                        "-rss_limit_mb=1024", "-timeout=20", f"-artifact_prefix={tmp_path}/"],
                       cwd=REPO, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-6000:]
    assert f"Done {SHORT_RUNS} runs" in r.stderr


# Inputs that crashed a decoder once (base64), by target.
REGRESSIONS = {
    # decode_record: a topic length byte pointing past TOTALSIZE made struct.error escape
    "record": ["AAAAbtqjIKc2EKaGAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAf9LS0tLS0tLS0tLS0tLS0tLS"
               "AAEAACqfAAAAAAAAAAAAAAAAAAAABWhlbGxv0tLS0hUVFRUVFRUV0kFHUwFh"],
}


@pytest.mark.parametrize("name,data", [(n, d) for n, ds in REGRESSIONS.items() for d in ds])
def test_regressions(name, data):
    targets.TARGETS[name](base64.b64decode(data))


@pytest.mark.parametrize("name", NAMES)
def test_seeds_pass(name):
    for seed in targets.seeds()[name]:
        targets.TARGETS[name](seed)
