"""Store files and shared memory are created 0600 (0660 with storeGroup) with fchmod, whatever
the umask; another user without access cannot map the store and stays on TCP; a member of the
configured group attaches locally. The second user is made with useradd (skipped, saying so,
when that is impossible)."""
from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile

import pytest

from shmq.store.control import segment_name

from .broker_helpers import start_broker  # noqa: F401  (fixture)
from .client_helpers import make_topic, wait_route
from .conftest import namesrv, processes, start_namesrv  # noqa: F401

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
USER, GROUP = "shmqguardtest", "shmqguardgrp"


def _modes(root: str) -> dict[str, int]:
    out = {}
    for dp, dns, fns in os.walk(root):
        out[dp] = stat.S_IMODE(os.stat(dp).st_mode)
        for f in fns:
            p = os.path.join(dp, f)
            if not os.path.islink(p) and not stat.S_ISSOCK(os.stat(p).st_mode):
                out[p] = stat.S_IMODE(os.stat(p).st_mode)
    return out


def _shm_mode(root: str) -> int:
    return stat.S_IMODE(os.stat("/dev/shm/" + segment_name(root).lstrip("/")).st_mode)


@pytest.fixture
def open_dir():
    """A directory every user may enter, so only the store's own modes protect it."""
    d = tempfile.mkdtemp(prefix="shmq-modes-", dir="/tmp")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _ensure_user(with_group: bool) -> tuple[int, int, int | None]:
    if os.geteuid() != 0:
        pytest.skip("creating a second user needs root")
    if shutil.which("useradd") is None or shutil.which("groupadd") is None:
        pytest.skip("useradd/groupadd not available: cannot make a second user")
    import grp
    import pwd
    try:
        grp.getgrnam(GROUP)
    except KeyError:
        subprocess.run(["groupadd", "-f", GROUP], check=False, capture_output=True)
    try:
        pwd.getpwnam(USER)
    except KeyError:
        r = subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", USER], capture_output=True, text=True)
        if r.returncode not in (0, 9):  # 9: it exists (a parallel test made it)
            pytest.skip(f"useradd failed: {r.stderr.strip()}")
    pw = pwd.getpwnam(USER)
    return pw.pw_uid, pw.pw_gid, grp.getgrnam(GROUP).gr_gid if with_group else None


def _run_as(uid, gid, groups, namesrv, topic, root) -> dict:
    r = subprocess.run([sys.executable, "-m", "tests.helpers.other_user_client", str(uid), str(gid),
                        ",".join(map(str, groups)) or "-", namesrv.addr, topic, root],
                       cwd=REPO, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_store_files_and_segment_are_private(namesrv, start_broker, open_dir):
    old = os.umask(0)  # the most permissive umask: fchmod must still give 0600
    try:
        br = start_broker(namesrv, store=os.path.join(open_dir, "store"))
    finally:
        os.umask(old)
    make_topic(br, "FM", 2)
    modes = _modes(br.store)
    assert modes[br.store] == 0o700
    loose = {p: oct(m) for p, m in modes.items() if m & 0o077}
    assert not loose, loose
    assert _shm_mode(br.store) == 0o600


def test_another_user_stays_on_tcp(namesrv, start_broker, open_dir):
    uid, gid, _ = _ensure_user(False)
    br = start_broker(namesrv, store=os.path.join(open_dir, "store"))
    make_topic(br, "FM", 2)
    wait_route(namesrv.addr, "FM")
    out = _run_as(uid, gid, [], namesrv, "FM", br.store)
    assert out["uid"] == uid
    assert out["read_key"].startswith("PermissionError"), out
    assert "Permission" in out["open_shm"], out
    assert out["attach_store"] != "ok", out
    assert out["auto_status"].endswith("SEND_OK") and out["auto_local"] is False, out
    assert "cannot be attached" in out["always"], out


def test_a_member_of_the_store_group_attaches(namesrv, start_broker, open_dir):
    uid, gid, sgid = _ensure_user(True)
    br = start_broker(namesrv, store=os.path.join(open_dir, "store"), settings={"storeGroup": GROUP})
    make_topic(br, "FM", 2)
    wait_route(namesrv.addr, "FM")
    assert _shm_mode(br.store) == 0o660
    assert stat.S_IMODE(os.stat(os.path.join(br.store, "attach.key")).st_mode) == 0o660
    out = _run_as(uid, gid, [sgid], namesrv, "FM", br.store)
    assert out["read_key"] == "ok" and out["open_shm"] == "ok", out
    assert out["auto_local"] is True and out["always"] == "ok", out
