"""File expiry (owner only). CommitLog files older than fileReservedTime hours go at the hours
listed in deleteWhen ("04", or "04;16"), or at once while disk use is above
diskMaxUsedSpaceRatio; above diskSpaceCleanForciblyRatio (85 %) the oldest go whatever their age. Never the file being written (or any after it).
Files are unlinked whole, never truncated: a reader still mapping one keeps reading it.
Then ConsumeQueue files wholly below the new minimum, and index files, follow."""
from __future__ import annotations

import logging
import os
import shutil
import time

from shmq.service import ThreadService

log = logging.getLogger("shmq.store.cleanup")
MAX_FILES_PER_ROUND = 10


class CleanupService(ThreadService):
    def __init__(self, store):
        super().__init__("shmq-cleanup", store.cfg.clean_interval_s, log=log)
        self.store = store
        self.cfg = store.cfg

    def delete_hour_now(self, now: float | None = None) -> bool:
        hours = {int(h) for h in str(self.cfg.delete_when).replace(",", ";").split(";") if h.strip().isdigit()}
        return time.localtime(now).tm_hour in hours

    def disk_used_ratio(self) -> float:
        u = shutil.disk_usage(self.cfg.commitlog_dir)
        return 100.0 * (u.total - u.free) / u.total if u.total else 0.0

    def run_once(self, *, at_delete_hour: bool | None = None, disk_ratio: float | None = None) -> list[int]:
        """One round, as RocketMQ's CleanCommitLogService: expired files go at the delete hour,
        or at once when disk use is above diskMaxUsedSpaceRatio; above the forcible ratio
        (85 %) the oldest files go whatever their age. Returns the deleted file indexes.
        Tests pass the hour and the disk ratio instead of waiting for them."""
        if at_delete_hour is None:
            at_delete_hour = self.delete_hour_now()
        if disk_ratio is None:
            disk_ratio = self.disk_used_ratio()
        space_full = disk_ratio > self.cfg.disk_max_used_space_ratio
        if space_full:
            log.warning("disk use %.1f%% is above diskMaxUsedSpaceRatio %.0f%%", disk_ratio,
                        self.cfg.disk_max_used_space_ratio)
        if not (at_delete_hour or space_full):
            return []
        # forcible deletion never starts below the ratio that starts any deletion
        forcibly = max(self.cfg.disk_clean_forcibly_ratio, self.cfg.disk_max_used_space_ratio)
        return self.delete_expired(force=disk_ratio > forcibly)

    def delete_expired(self, *, force: bool = False) -> list[int]:
        store = self.store
        cl = store.commitlog
        fsize = cl.file_size
        writing = store.commit_pos // fsize
        keep_after = time.time() - self.cfg.file_reserved_time_hours * 3600
        deleted = []
        for idx in cl.file_indexes():
            if idx >= writing or len(deleted) >= MAX_FILES_PER_ROUND:
                break
            try:
                mtime = os.stat(cl.path(idx)).st_mtime
            except FileNotFoundError:
                continue
            if mtime > keep_after and not force:
                break  # files are in age order: the rest are younger
            if not store.expiry_allowed((idx + 1) * fsize):
                break  # a guard (the timer wheel) still needs records in this file
            # readers must stop using the file before it goes: raise min_pos first
            store.cb.ctl.pos.min_pos = (idx + 1) * fsize
            cl.delete(idx)
            deleted.append(idx)
            log.info("deleted commitlog file %020d (%s)", idx * fsize,
                     "disk above ratio" if force else "expired")
            if force and len(deleted) >= 1:
                break  # one file a round under pressure, then re-measure
        if deleted:
            self._trim_queues()
        return deleted

    def _trim_queues(self) -> None:
        store = self.store
        min_pos = store.cb.ctl.pos.min_pos
        for slot, topic, qid, nxt, mn in list(store.cb.iter_queue_slots()):
            cq = store.queues.get(topic, qid)
            # new min offset: first entry still pointing into a live file
            lo = cq.first_at_or_after(min_pos, max(mn, cq.first_file_offset()), nxt)
            store.cb.ctl.queues[slot].min_offset = lo
            for fi in cq.file_indexes():
                if (fi + 1) * cq.per_file <= lo and (fi + 1) * cq.per_file < nxt:
                    cq.delete_file(fi)
        if store.dispatcher is not None:
            store.dispatcher.index.delete_expired(min_pos)
