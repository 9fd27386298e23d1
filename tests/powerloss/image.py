"""What a power cut leaves of a store: built from the live files of a store whose processes
were all killed with SIGKILL (the page cache as the kernel held it) and the durability trace
(the durability trace of shmq/store/faults.py: what the store made durable).

The rules, one random (seeded) outcome per call:

* a directory entry survives when the directory's last fsync listed it with the same inode;
  an entry created, replaced or removed since then may or may not have reached the disk
  (one coin per entry; a replaced name keeps its old inode or gets the new one);
* a file keeps its durable bytes (the trace's shadow); every 4 KiB page whose live content
  differs from them is the live page or the durable one, at random: the kernel may have
  written it back before the cut, or not. Records straddling pages are torn this way;
* a file created whole (posix_fallocate, reported by ``created``) keeps its size with its
  name (journalled metadata); any other file whose size changed since its last sync is cut
  to its durable size or kept at its live size;
* a removed file whose removal is not durable comes back with its durable bytes only.
"""
from __future__ import annotations

import json
import os
import random
import stat
import urllib.parse
from dataclasses import dataclass, field

from shmq.store import faults as trace

PAGE = trace.PAGE


@dataclass
class ImageReport:
    files: int = 0
    pages_live: int = 0         # differing pages taken from the page cache (written back)
    pages_durable: int = 0      # differing pages taken from the shadow (dropped)
    vanished: list = field(default_factory=list)    # live names the cut removed
    reverted: list = field(default_factory=list)    # names that went back to an older inode
    resurrected: list = field(default_factory=list)  # removed names that came back
    truncated: list = field(default_factory=list)


def _listings(trace_dir: str) -> dict[str, dict[str, str]]:
    out = {}
    d = os.path.join(trace_dir, "dirs")
    for name in os.listdir(d) if os.path.isdir(d) else ():
        if name.endswith(".json"):
            with open(os.path.join(d, name)) as f:
                out[urllib.parse.unquote(name[:-5])] = json.load(f)
    return out


def _key(st: os.stat_result) -> str:
    return f"{st.st_dev:x}-{st.st_ino}"


def _live_inodes(root: str) -> dict[str, str]:
    """inode key -> one live path holding it."""
    out = {}
    for d, _, names in os.walk(root):
        for n in names:
            p = os.path.join(d, n)
            st = os.lstat(p)
            if stat.S_ISREG(st.st_mode):
                out.setdefault(_key(st), p)
    return out


def _read(path: str | None) -> bytes | None:
    if path is None:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


class Cut:
    def __init__(self, live_root: str, trace_dir: str, rng: random.Random):
        self.live_root = os.path.abspath(live_root)
        self.trace_dir = trace_dir
        self.rng = rng
        self.listings = _listings(trace_dir)
        self.inodes = _live_inodes(self.live_root)
        self.report = ImageReport()

    def build(self, out_root: str) -> ImageReport:
        os.makedirs(out_root, exist_ok=True)
        self._dir(self.live_root, out_root)
        return self.report

    def _dir(self, live_dir: str, out_dir: str) -> None:
        live, special = {}, set()
        with os.scandir(live_dir) as it:
            for e in it:
                if not (e.is_file(follow_symlinks=False) or e.is_dir(follow_symlinks=False)):
                    special.add(e.name)  # a unix socket (broker.sock) holds nothing a power cut keeps
                    continue
                st = e.stat(follow_symlinks=False)
                live[e.name] = (_key(st), e.is_dir(follow_symlinks=False))
        durable = self.listings.get(os.path.abspath(live_dir), {})
        rel = os.path.relpath(live_dir, self.live_root)
        for name in sorted((set(live) | set(durable)) - special):
            have, old = live.get(name), durable.get(name)
            path = os.path.join(rel, name)
            if have is not None and have[0] == old:
                key, is_dir = have
            elif have is not None and old is None:
                if self.rng.random() < 0.5:
                    self.report.vanished.append(path)
                    continue
                key, is_dir = have
            elif have is not None:
                if have[1] or self.rng.random() < 0.5:
                    key, is_dir = have
                else:
                    key, is_dir = old, False
                    self.report.reverted.append(path)
            else:
                if self.rng.random() < 0.5 or not os.path.exists(self._shadow(old)):
                    continue
                key, is_dir = old, False
                self.report.resurrected.append(path)
            target = os.path.join(out_dir, name)
            if is_dir:
                os.makedirs(target, exist_ok=True)
                self._dir(os.path.join(live_dir, name), target)
            else:
                self._file(key, target, path)

    def _shadow(self, key: str) -> str:
        return os.path.join(self.trace_dir, "data", key)

    def _file(self, key: str, target: str, rel: str) -> None:
        self.report.files += 1
        live = _read(self.inodes.get(key))
        shadow = _read(self._shadow(key))
        whole = _read(self._shadow(key) + ".size")
        if live is None:
            data = shadow or b""
        else:
            # a stale marker (an inode number reused by a file not created whole) is ignored
            size = int(whole) if whole and int(whole) == len(live) else None
            data = self._torn(live, shadow or b"", size, rel)
        with open(target, "wb") as f:
            f.write(data)

    def _torn(self, live: bytes, durable: bytes, whole: int | None, rel: str) -> bytes:
        if whole is not None:
            size = whole
        elif len(durable) == len(live):
            size = len(live)
        else:
            size = self.rng.choice((len(durable), len(live)))
            if size < len(live):
                self.report.truncated.append(rel)
        out = bytearray(durable[:size].ljust(size, b"\0"))
        for p in range(0, size, PAGE):
            lp = live[p:p + PAGE]
            if not lp or lp == out[p:p + len(lp)]:
                continue
            if self.rng.random() < 0.5:
                out[p:p + len(lp)] = lp
                self.report.pages_live += 1
            else:
                self.report.pages_durable += 1
        return bytes(out)


def mark_durable(root: str, trace_dir: str) -> None:
    """Record every file and directory under ``root`` as on disk (what a store finds after the
    reboot is all durable), so that a later cut of a store opened there starts from it."""
    for d, dirs, names in os.walk(root):
        listing = {}
        for n in dirs + names:
            p = os.path.join(d, n)
            st = os.lstat(p)
            listing[n] = _key(st)
            if n in names:
                shadow = trace.data_path(trace_dir, st)
                os.makedirs(os.path.dirname(shadow), exist_ok=True)
                with open(p, "rb") as src, open(shadow, "wb") as dst:
                    dst.write(src.read())
                with open(shadow + ".size", "w") as f:
                    f.write(str(st.st_size))
        out = trace.listing_path(trace_dir, d)
        os.makedirs(os.path.dirname(out), exist_ok=True)
        with open(out, "w") as f:
            json.dump(listing, f)


def power_cut(live_root: str, trace_dir: str, out_root: str, seed: int, *,
              durable_into: str | None = None) -> ImageReport:
    """Write to ``out_root`` one store a power cut could have left of ``live_root``; with
    ``durable_into``, record it there as durable (to cut a store opened on it again)."""
    report = Cut(live_root, trace_dir, random.Random(seed)).build(out_root)
    if durable_into is not None:
        mark_durable(out_root, durable_into)
    return report
