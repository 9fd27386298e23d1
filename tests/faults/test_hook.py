"""The fault hook itself: its rule syntax, its counters, the control file read while a process
runs, and that it costs nothing when unset (every store call site tests ``faults.ACTIVE``)."""
from __future__ import annotations

import errno

import pytest

from shmq.errors import DiskFull
from shmq.store import faults, files


@pytest.fixture(autouse=True)
def _off_after():
    yield
    faults.configure()


def test_unset_means_inactive_and_no_fault():
    faults.configure()
    assert faults.ACTIVE is False
    assert faults.errno_at("msync", "/x/commitlog/0") == 0
    faults.hit("preallocate", "/x/commitlog/0")


def test_rules_match_point_and_path_with_after_and_count():
    faults.configure("enospc:preallocate:commitlog:after=2:count=1, eio:msync")
    assert faults.ACTIVE
    calls = [faults.errno_at("preallocate", "/s/commitlog/000") for _ in range(4)]
    assert calls == [0, 0, errno.ENOSPC, 0]
    assert faults.errno_at("preallocate", "/s/consumequeue/T/0/000") == 0   # path not matched
    assert faults.errno_at("msync", "/s/index/2024") == errno.EIO            # no MATCH: every call
    with pytest.raises(OSError) as e:
        faults.hit("msync", "/s/commitlog/000")
    assert e.value.errno == errno.EIO


@pytest.mark.parametrize("bad", ["enospc", "enoway:msync", "eio:flush", "eio:msync:after=x", "eio:msync:when=1"])
def test_malformed_rules_are_refused(bad):
    with pytest.raises(ValueError):
        faults.configure(bad)


def test_control_file_is_followed_while_running(tmp_path):
    path = tmp_path / "faults"
    faults.configure(file=str(path))
    assert faults.errno_at("write", "/s/config/topics.json") == 0           # no file: no fault
    path.write_text("enospc:write:topics.json\n")
    assert faults.errno_at("write", "/s/config/topics.json") == errno.ENOSPC
    assert faults.errno_at("write", "/s/checkpoint") == 0
    path.write_text("# nothing\n")
    assert faults.errno_at("write", "/s/config/topics.json") == 0
    path.write_text("not a rule")
    assert faults.errno_at("write", "/s/config/topics.json") == 0           # logged, ignored
    path.unlink()
    assert faults.errno_at("write", "/s/config/topics.json") == 0


def test_env_is_read_when_asked(monkeypatch):
    monkeypatch.setenv("SHMQ_FAULTS", "edquot:preallocate")
    faults.configure_from_env()
    assert faults.errno_at("preallocate", "/any") == errno.EDQUOT


def test_file_primitives_fail_cleanly(tmp_path):
    """A preallocation fault is DiskFull and leaves no file; a failed atomic write keeps the
    old content and leaves no temp file behind."""
    faults.configure("enospc:preallocate, enospc:write:cfg.json")
    with pytest.raises(DiskFull) as e:
        files.create_preallocated(str(tmp_path / "big"), 1 << 20)
    assert e.value.code == 14 and "disk is full" in e.value.remark and str(tmp_path) not in e.value.remark
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    faults.configure()
    files.write_atomic(str(tmp_path / "cfg.json"), b"old")
    faults.configure("enospc:write:cfg.json")
    with pytest.raises(OSError) as e2:
        files.write_atomic(str(tmp_path / "cfg.json"), b"new")
    assert e2.value.errno == errno.ENOSPC
    assert (tmp_path / "cfg.json").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cfg.json"]


def test_a_filesystem_without_fallocate_still_gets_allocated_files(tmp_path, monkeypatch):
    """The fallback writes zeros (a sparse file would turn a full disk into SIGBUS later)."""
    def unsupported(fd, offset, length):
        raise OSError(errno.EOPNOTSUPP, "Operation not supported")
    monkeypatch.setattr(files.os, "posix_fallocate", unsupported)
    path = tmp_path / "f"
    assert files.create_preallocated(str(path), 3 << 20)
    st = path.stat()
    assert st.st_size == 3 << 20 and st.st_blocks * 512 >= 3 << 20
    assert path.read_bytes() == bytes(3 << 20)
