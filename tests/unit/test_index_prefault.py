"""A busy index file's hash-slot pages are mapped writable at once (IndexFile.prefault_slots,
MADV_POPULATE_WRITE) instead of faulting one page per put: after the prefault the dispatch's
puts take (nearly) no page faults, a file that took only a few keys is never prefaulted, and
after an msync the pages are prefaulted again only when the period before it was busy. The
files' bytes are what indexing without it writes (test_index_dispatch checks the C dispatch
against Python's put)."""
from __future__ import annotations

import resource

from shmq.store import index_service
from shmq.store.index_service import IndexService

from .test_index_dispatch import files_bytes, make_log

SLOTS = 200_000          # 800 KB of slots: ~196 pages


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt


def _index(svc: IndexService, log: bytearray, start: int, end: int) -> int:
    off, _ = svc.build_records(log, 0, start, end, len(log))
    return off


def test_a_busy_file_is_prefaulted_and_its_puts_then_take_no_faults(tmp_path):
    log, _ = make_log(3000)
    svc = IndexService(tmp_path / "i", SLOTS, 100_000)
    svc.load()
    off = _index(svc, log, 0, len(log) // 40)     # ~75 records, ~100 keys: over a quarter of the pages
    f = svc.files()[-1]
    f_pages = f.slot_pages()
    assert f.index_count - 1 >= f_pages // index_service.PREFAULT_AFTER
    assert f.slots_mapped
    before = _faults()
    _index(svc, log, off, len(log))                 # ~2,500 more keys into random slots
    assert _faults() - before < f_pages // 4, "the slot pages were faulted in already"
    ref = IndexService(tmp_path / "ref", SLOTS, 100_000)
    ref.load()
    _index(ref, log, 0, len(log))
    assert files_bytes(svc) == files_bytes(ref)


def test_a_file_with_a_few_keys_is_not_prefaulted_nor_after_a_quiet_period(tmp_path):
    log, _ = make_log(3000)
    svc = IndexService(tmp_path / "i", SLOTS, 100_000)
    svc.load()
    off = _index(svc, log, 0, 2000)                 # a few dozen keys
    f = svc.files()[-1]
    assert not f.slots_mapped
    off = _index(svc, log, off, len(log) // 6)      # busy: prefaulted
    assert f.slots_mapped
    svc.flush()                                     # the msync write-protects the pages again
    assert not f.slots_mapped
    off = _index(svc, log, off, len(log) // 3)      # the period before had < 4x its pages in puts
    assert not f.slots_mapped
