"""ARCHITECTURE.md is the map a newcomer reads first: every file or package it names must
exist (paths are relative to shmq/, or to the repository root), so the map cannot drift
from the code without this test failing."""
from __future__ import annotations

import pathlib
import re

REPO = pathlib.Path(__file__).resolve().parents[2]


def _named_paths(text: str) -> list[str]:
    out = []
    for tok in re.findall(r"`([^`\s]+)`", text):
        if "/" in tok or re.search(r"\.(py|h|c|md)$", tok):
            out.append(tok)
    return out


def test_every_path_in_the_map_exists():
    text = (REPO / "ARCHITECTURE.md").read_text()
    paths = _named_paths(text)
    assert len(paths) > 40  # the feature table and the record's road name files
    missing = [p for p in paths if not ((REPO / "shmq" / p).exists() or (REPO / p).exists())]
    assert not missing, f"ARCHITECTURE.md names files that do not exist: {missing}"


def test_readme_links_the_map():
    assert "(ARCHITECTURE.md)" in (REPO / "README.md").read_text()
