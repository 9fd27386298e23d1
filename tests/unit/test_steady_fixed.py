"""The objects a TcpPull chain arms native/pull_steady.c with (``TcpPull._arm``) are held for the
chain's life, so they must be the ones the consumer, its client instance, its ProcessQueue and
its offset store go on using: each is made once, in its owner's ``__init__``, and only changed
in place. If one were rebound (``self._filters = {...}`` anywhere else), a running chain would
read the old object: a new tag filter, a route change or a commit would go unseen by the steady
path. This test fails on such a rebinding anywhere in the client package."""
import ast
from pathlib import Path

import shmq.client

# tcp_pull._arm's fixed objects: owner's attribute names
FIXED = {"_filters", "_pull_from", "broker_addrs", "_unreachable", "_spans", "table", "lock"}
# the classes that own them (a ``lock`` / ``table`` elsewhere is another object's)
OWNERS = {"ConsumerCore", "ClientInstance", "ProcessQueue", "RemoteOffsetStore", "LocalFileOffsetStore"}


def _rebinds(tree: ast.AST, owned_only: bool):
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in (n for n in ast.walk(cls) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            if fn.name == "__init__":
                continue
            for node in ast.walk(fn):
                targets = (node.targets if isinstance(node, ast.Assign)
                           else [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
                for t in targets:
                    if isinstance(t, ast.Attribute) and t.attr in FIXED:
                        if t.attr in ("lock", "table") and owned_only and cls.name not in OWNERS:
                            continue
                        yield f"{cls.name}.{fn.name}: .{t.attr} ="


def test_the_steady_chains_fixed_objects_are_never_rebound():
    root = Path(shmq.client.__file__).parent
    found = []
    for path in sorted(root.glob("*.py")):
        found += [f"{path.name}: {r}" for r in _rebinds(ast.parse(path.read_text()), owned_only=True)]
    assert found == []


def test_the_check_sees_a_rebinding():
    src = "class ConsumerCore:\n    def __init__(self):\n        self._filters = {}\n" \
          "    def subscribe(self):\n        self._filters = {'T': None}\n"
    assert list(_rebinds(ast.parse(src), owned_only=True)) == ["ConsumerCore.subscribe: ._filters ="]
