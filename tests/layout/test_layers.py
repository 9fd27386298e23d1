"""The package layers: imports point one way (cli > chaos > bench > client/broker/namesrv > protocol,
store > message > native, errors), and modules stay small. The table is the project's rule;
the test reads only files in this repository."""
from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parents[2] / "shmq"
MAX_LINES = 600

FORBIDDEN = {   # package -> shmq packages it must never import
    "native":   {"errors", "message", "protocol", "store", "client", "broker", "namesrv", "cli", "chaos", "bench"},
    "message":  {"protocol", "store", "client", "broker", "namesrv", "cli", "chaos", "bench"},
    "errors":   {"native", "message", "protocol", "store", "client", "broker", "namesrv", "cli", "chaos", "bench"},
    "protocol": {"native", "store", "client", "broker", "namesrv", "cli", "chaos", "bench"},
    "store":    {"protocol", "client", "broker", "namesrv", "cli", "chaos", "bench"},
    "namesrv":  {"store", "native", "client", "broker", "cli", "chaos", "bench"},   # message is allowed
    "client":   {"broker", "namesrv", "cli", "chaos", "bench"},
    "broker":   {"client", "namesrv", "cli", "chaos", "bench"},
    # the dashboard sees a cluster only as a client does (issue 15): client, protocol, message
    "dashboard": {"native", "store", "broker", "namesrv", "cli", "chaos", "bench"},
    # colours and units shared by the dashboard and shmq-bench --plot: imports nothing of shmq
    "palette":  {"native", "errors", "message", "protocol", "store", "client", "broker", "namesrv", "cli", "chaos",
                 "bench", "dashboard", "service"},
    # the background-service pattern: every layer may use it, so it imports no shmq package
    "service":  {"errors", "native", "message", "protocol", "store", "client", "broker", "namesrv", "cli", "chaos", "bench"},
    # shmq chaos (issue 14) starts servers and clients as a user would, through bench.services:
    # below cli only; nothing imports it but cli
    "chaos":    {"cli", "dashboard"},
}


def _modules():
    return sorted(ROOT.rglob("*.py"))


def _package_of(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).parts[0].removesuffix(".py")


def _imported(tree: ast.AST, path: pathlib.Path):
    """Absolute names of every module ``path`` imports (relative imports resolved)."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(rel.parts[:-node.level])
                yield ".".join(base + ([node.module] if node.module else []))
            elif node.module:
                yield node.module


def test_no_import_against_the_direction():
    bad = []
    for f in _modules():
        pkg = _package_of(f)
        for mod in _imported(ast.parse(f.read_text()), f):
            parts = mod.split(".")
            if parts[0] == "shmq" and len(parts) > 1 and parts[1] in FORBIDDEN.get(pkg, ()):
                bad.append(f"{f.relative_to(ROOT.parent)} imports shmq.{parts[1]}")
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_relative_imports_resolve_inside_their_package():
    """The check above sees relative imports only because they resolve to shmq.<pkg>: a
    sanity check of the resolver on a known module."""
    f = ROOT / "store" / "put.py"
    names = set(_imported(ast.parse(f.read_text()), f))
    assert "shmq.store.delay_levels" in names


def test_modules_stay_small():
    """The Python modules and the C core's files alike (shmq/native/*.c, *.h)."""
    native = sorted((ROOT / "native").glob("*.[ch]"))
    assert len(native) > 10  # the glob sees the C files
    big = [f"{f.relative_to(ROOT.parent)} ({n})" for f in _modules() + native
           if (n := f.read_text().count("\n")) > MAX_LINES]
    assert not big, f"modules over {MAX_LINES} lines: {', '.join(big)}"


def test_protocol_does_not_load_the_c_core():
    """protocol may import message, so nothing message exports to protocol may load native."""
    import subprocess
    import sys
    code = ("import sys, shmq.protocol, shmq.protocol.bodies, shmq.protocol.headers, shmq.message.record, "
            "shmq.message.classify, shmq.message.sql_filter; "
            "sys.exit(1 if any(m.startswith('shmq.native') or m.startswith('shmq.store') for m in sys.modules) else 0)")
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


# ---- inside the broker: which process runs what (shmq/broker/__init__.py) ----------------------
BROKER_FORBIDDEN = {   # broker subpackage -> broker subpackages it must never import
    "shared":     {"supervisor", "worker"},
    "supervisor": {"worker"},
    "worker":     {"supervisor"},
}
#: The request processors see the worker only through worker/context.py (and are registered
#: by worker/dispatch.py): they never import the process module or the dispatcher.
PROCESSORS_NEVER = {"shmq.broker.worker.main", "shmq.broker.worker.dispatch"}


def _imported_names(tree: ast.AST, path: pathlib.Path):
    """As _imported, plus ``pkg.name`` for each ``from pkg import name`` (a module may be
    imported that way: ``from .. import main``)."""
    rel = path.relative_to(ROOT.parent).with_suffix("")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = (".".join(list(rel.parts[:-node.level]) + ([node.module] if node.module else []))
                    if node.level else node.module or "")
            yield base
            for a in node.names:
                yield f"{base}.{a.name}"
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield a.name


def test_broker_supervisor_and_worker_never_import_each_other():
    bad = []
    broker = ROOT / "broker"
    for f in sorted(broker.rglob("*.py")):
        parts = f.relative_to(broker).parts
        sub = parts[0] if len(parts) > 1 else None
        for mod in _imported_names(ast.parse(f.read_text()), f):
            p = mod.split(".")
            if p[:2] == ["shmq", "broker"] and len(p) > 2 and p[2] in BROKER_FORBIDDEN.get(sub, ()):
                bad.append(f"{f.relative_to(ROOT.parent)} imports {mod}")
            if parts[:2] == ("worker", "processors") and any(mod == m or mod.startswith(m + ".")
                                                             for m in PROCESSORS_NEVER):
                bad.append(f"{f.relative_to(ROOT.parent)} imports {mod}")
    assert not bad, "imports against the broker's process layout:\n" + "\n".join(bad)
