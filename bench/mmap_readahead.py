"""Why a catch-up read from disk is slow through a mapping: one file of random bytes, dropped from
the page cache (fsync + POSIX_FADV_DONTNEED, shmq/bench/pagecache.py) before each pass, then read
once sequentially: touching one byte per page through a read-only mapping (plain,
MADV_SEQUENTIAL, MADV_WILLNEED), and with read() into a 1 MiB buffer. Prints GB/s per pass.

    .venv/bin/python bench/mmap_readahead.py [--mib 512] [--dir DIR] [--passes 3]
"""
from __future__ import annotations

import argparse
import mmap
import os
import statistics
import tempfile
import time

from shmq.bench import pagecache


def touch_mapped(path: str, size: int, advice: int | None) -> float:
    pagecache.drop([path])
    fd = os.open(path, os.O_RDONLY)
    try:
        mm = mmap.mmap(fd, size, prot=mmap.PROT_READ)
    finally:
        os.close(fd)
    try:
        if advice is not None:
            mm.madvise(advice)
        t0 = time.monotonic()
        s = 0
        for off in range(0, size, mmap.PAGESIZE):
            s += mm[off]
        return size / (time.monotonic() - t0) / 1e9
    finally:
        mm.close()


def read_plain(path: str, size: int) -> float:
    pagecache.drop([path])
    buf = bytearray(1 << 20)
    t0 = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    return size / (time.monotonic() - t0) / 1e9


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=int, default=512)
    ap.add_argument("--dir", default=None, help="where the file goes (on disk, not tmpfs)")
    ap.add_argument("--passes", type=int, default=3)
    a = ap.parse_args()
    size = a.mib << 20
    fd, path = tempfile.mkstemp(prefix="shmq-mmap-ra-", dir=a.dir)
    try:
        with os.fdopen(fd, "wb") as f:
            block = os.urandom(1 << 20)
            for _ in range(a.mib):
                f.write(block)
        ways = [("mapping, plain", lambda: touch_mapped(path, size, None)),
                ("mapping, MADV_SEQUENTIAL", lambda: touch_mapped(path, size, mmap.MADV_SEQUENTIAL)),
                ("mapping, MADV_WILLNEED", lambda: touch_mapped(path, size, mmap.MADV_WILLNEED)),
                ("read(), 1 MiB buffer", lambda: read_plain(path, size))]
        results = {name: [] for name, _ in ways}
        for _ in range(a.passes):  # interleaved, so the disk's load moves all of them alike
            for name, fn in ways:
                results[name].append(fn())
        print(f"# {a.mib} MiB file dropped from the page cache before each pass; "
              f"load average {os.getloadavg()[0]:.2f}; read_ahead: see /sys/block/*/queue/read_ahead_kb")
        print("| read | GB/s, median | passes |\n|---|---:|---|")
        for name, v in results.items():
            print(f"| {name} | {statistics.median(v):.2f} | {', '.join(f'{x:.2f}' for x in v)} |")
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
