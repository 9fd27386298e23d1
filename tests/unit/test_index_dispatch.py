"""The C index dispatch (IndexService.build_records, shmq_index_records) writes the same
IndexFiles, byte for byte, as indexing each record through IndexService.build: roll-overs in
the middle of a record's keys, rollback records, repeated and empty keys, non-ASCII keys."""
from __future__ import annotations

import random

import pytest

from shmq.errors import StoreCorrupt
from shmq.message.layout import BLANK_MAGIC
from shmq.message.properties import encode_properties
from shmq.message.record import encode_record
from shmq.store.index_service import IndexService


def make_log(n: int, seed: int = 7) -> tuple[bytearray, list[tuple]]:
    rnd = random.Random(seed)
    log, recs = bytearray(), []
    for i in range(n):
        props = {"UNIQ_KEY": f"ID{i:06d}"}
        if i % 3 == 0:
            props["KEYS"] = " ".join(rnd.choice(["a", "b", "", "ключ", "😀x", f"k{i}"]) for _ in range(rnd.randint(1, 4)))
        if i % 11 == 0:
            props["UNIQ_KEY"] = ""
        if i % 13 == 0:
            del props["UNIQ_KEY"]
        sysflag = 0xC if i % 17 == 5 else 0
        topic = "T" if i % 2 else "Тема"
        rec = encode_record(topic=topic, body=b"x" * rnd.randint(1, 50), properties=encode_properties(props),
                            phys_offset=len(log), sysflag=sysflag, store_timestamp=1_700_000_000_000 + i * 700)
        recs.append((topic, props.get("KEYS"), props.get("UNIQ_KEY"), len(log), 1_700_000_000_000 + i * 700, sysflag))
        log += rec
    return log, recs


def files_bytes(svc: IndexService) -> list[bytes]:
    return [bytes(f.mapping()) for f in svc.files()]


@pytest.mark.parametrize("index_num", [7, 64, 4096])
def test_c_dispatch_writes_what_python_build_writes(tmp_path, index_num):
    log, recs = make_log(300)
    ref = IndexService(tmp_path / "py", 16, index_num)
    ref.load()
    for r in recs:
        ref.build(*r)
    svc = IndexService(tmp_path / "c", 16, index_num)
    svc.load()
    off, pos = 0, 0
    # uneven runs, as the dispatcher sees the commit position move
    for end in list(range(0, len(log), 997)) + [len(log)]:
        off, blank = svc.build_records(log, 0, off, max(end, off), len(log))
        assert not blank
    assert off == len(log)
    assert len(svc.files()) == len(ref.files())
    assert files_bytes(svc) == files_bytes(ref)
    topic, keys, _, phys, _, _ = next(r for r in recs if r[1] and r[1].strip() and r[5] == 0)
    word = next(w for w in keys.split(" ") if w)
    assert phys in svc.query(topic, word, 64, 0, 2**62)
    ref.close()
    svc.close()


def test_c_dispatch_stops_at_blank_and_refuses_garbage(tmp_path):
    log, _ = make_log(10)
    end = len(log)
    log += (64).to_bytes(4, "big") + (BLANK_MAGIC & 0xFFFFFFFF).to_bytes(4, "big") + bytes(56)
    svc = IndexService(tmp_path / "c", 16, 64)
    svc.load()
    assert svc.build_records(log, 0, 0, len(log), len(log)) == (end, True)
    bad = bytearray(log[:end]) + b"\x00" * 40
    with pytest.raises(StoreCorrupt):
        svc.build_records(bad, 0, end, len(bad), len(bad))
    # a record that crosses the limit (not yet committed) is not a record
    with pytest.raises(StoreCorrupt):
        svc.build_records(log, 0, 0, end, end - 1)
    svc.close()
