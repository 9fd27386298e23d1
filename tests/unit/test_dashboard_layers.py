"""The dashboard talks to a cluster only as a client does (DESIGN §2 extended by issue 15):
shmq.dashboard may import client, protocol, message, errors, service and the palette, never the broker,
the store, the NameServer or the CLI; shmq.palette imports nothing of shmq."""
from __future__ import annotations

import ast
import pathlib

import shmq

ROOT = pathlib.Path(shmq.__file__).parent
ALLOWED = {"dashboard": {"dashboard", "client", "protocol", "message", "errors", "palette", "service"}, "palette": set()}


def _imports(path: pathlib.Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            yield node.module
        elif isinstance(node, ast.ImportFrom) and node.level:
            yield "shmq.dashboard"  # relative imports stay inside the package


def test_dashboard_and_palette_imports():
    bad = []
    for pkg, allowed in ALLOWED.items():
        files = list((ROOT / pkg).rglob("*.py")) if (ROOT / pkg).is_dir() else [ROOT / f"{pkg}.py"]
        assert files
        for f in files:
            for mod in _imports(f):
                parts = mod.split(".")
                if parts[0] == "shmq" and len(parts) > 1 and parts[1] not in allowed:
                    bad.append(f"{f.relative_to(ROOT)} imports {mod}")
    assert not bad, bad
