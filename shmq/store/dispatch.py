"""The index dispatcher (owner only): follows the commit position and feeds every record's
keys into the IndexFiles. It may lag the append by milliseconds; its durable progress (the
offset below which every record is in index files on disk) goes into the checkpoint."""
from __future__ import annotations

import logging
import threading
import time

from .index_service import IndexService

log = logging.getLogger("shmq.store.index")
_SLICE = 4 << 20  # bytes of records per C run
#: The index may lag the append by this much under load. Only query-by-key reads it, and a
#: poll is a wake-up of this thread competing with producers and consumers for the CPU: at
#: 1 ms it was most of the broker's CPU at 10,000 msgs/s; one C run indexes 5 ms of
#: appends (thousands of records) in well under a millisecond.
BUSY_POLL_S = 0.005


class IndexDispatcher:
    def __init__(self, store):
        self.store = store
        cfg = store.cfg
        self.index = IndexService(cfg.index_dir, cfg.max_hash_slot_num, cfg.max_index_num)
        self.index.load()
        start = min(store.checkpoint.index_flushed, store.commit_pos)
        # Index pages written after the last index flush may be torn after a power loss:
        # cut back to what the checkpoint says is on disk and rebuild from there.
        rebuild = self.index.truncate_after(start)
        if rebuild is not None:
            start = min(start, rebuild)
        self.pos = max(start, store.cb.ctl.pos.min_pos)
        self.flushed_upto = self.pos
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shmq-index", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._flush()
        self.index.close()

    def _flush(self) -> None:
        upto = self.pos
        self.index.flush()
        self.flushed_upto = upto

    def wait_until(self, pos: int, timeout: float = 5.0) -> bool:
        """Tests and queries: wait until everything below ``pos`` is indexed."""
        deadline = time.monotonic() + timeout
        while self.pos < pos and time.monotonic() < deadline:
            time.sleep(0.002)
        return self.pos >= pos

    def _run(self) -> None:
        last_flush = time.monotonic()
        last_busy = 0.0
        while not self._stop.is_set():
            # While appends keep coming, poll every BUSY_POLL_S instead of sleeping on the
            # store's futex: a registered waiter makes every append pay a wake-up syscall
            # (and this process a context switch). Idle for 20 ms: sleep on the futex.
            if time.monotonic() - last_busy < 0.02:
                time.sleep(BUSY_POLL_S)
                commit = self.store.commit_pos
            else:
                commit = self.store.wait(self.pos, 0.1)
            if commit > self.pos:
                last_busy = time.monotonic()
            try:
                self._dispatch_to(commit)
            except Exception:
                log.exception("index dispatch failed at %d", self.pos)
                time.sleep(0.1)
            if time.monotonic() - last_flush >= 1.0:
                self._flush()
                last_flush = time.monotonic()

    def _dispatch_to(self, commit: int) -> None:
        """Index everything below ``commit``: one C run per commit-log file, in slices so a
        stop is seen within a few milliseconds."""
        cl = self.store.commitlog
        fsize = cl.file_size
        while self.pos < commit and not self._stop.is_set():
            idx, off = divmod(self.pos, fsize)
            base = idx * fsize
            limit = min(commit - base, fsize)
            done, blank = self.index.build_records(cl.map(idx), base, off, min(limit, off + _SLICE), limit)
            self.pos = base + fsize if blank else base + done
