"""Every constant the Python side uses matches the C layout (layout.h is the source)."""
from shmq.native import ffi, lib
from shmq.store import record
from shmq.store.consume_queue import ENTRY, ENTRY_SIZE


def test_record_offsets_match_layout_h():
    pairs = {
        "R_TOTALSIZE": "SHMQ_R_TOTALSIZE", "R_MAGIC": "SHMQ_R_MAGIC", "R_BODYCRC": "SHMQ_R_BODYCRC",
        "R_QUEUEID": "SHMQ_R_QUEUEID", "R_FLAG": "SHMQ_R_FLAG", "R_QUEUEOFFSET": "SHMQ_R_QUEUEOFFSET",
        "R_PHYSOFFSET": "SHMQ_R_PHYSOFFSET", "R_SYSFLAG": "SHMQ_R_SYSFLAG", "R_BORNTS": "SHMQ_R_BORNTS",
        "R_BORNHOST": "SHMQ_R_BORNHOST", "R_STORETS": "SHMQ_R_STORETS", "R_STOREHOST": "SHMQ_R_STOREHOST",
        "R_RECONSUME": "SHMQ_R_RECONSUME", "R_PREPARED": "SHMQ_R_PREPARED", "R_BODYLEN": "SHMQ_R_BODYLEN",
    }
    for py, c in pairs.items():
        assert getattr(record, py) == getattr(lib, c), py
    assert record.MESSAGE_MAGIC == lib.SHMQ_MESSAGE_MAGIC == 0xDAA320A7
    assert record.BLANK_MAGIC == lib.SHMQ_BLANK_MAGIC == 0xCBD43194
    assert record.RECORD_FIXED == lib.SHMQ_RECORD_FIXED == 91
    assert record.HEADER.size == lib.SHMQ_R_BODYLEN + 4


def test_consume_queue_entry():
    assert ENTRY.size == ENTRY_SIZE == lib.SHMQ_CQ_ENTRY_SIZE == 20


def test_shared_struct_geometry():
    assert ffi.sizeof("shmq_ctl_header") == 64
    assert ffi.sizeof("shmq_owner") == 64
    assert ffi.sizeof("shmq_lockword") == 64
    assert ffi.sizeof("shmq_intent") == 64
    assert ffi.sizeof("shmq_positions") == 192
    assert ffi.offsetof("shmq_positions", "flushed_pos") == 64
    assert ffi.offsetof("shmq_ctl", "queues") == lib.SHMQ_QUEUE_TABLE_OFFSET
    assert ffi.sizeof("shmq_queue_slot") == 160
    assert ffi.sizeof("shmq_offset_slot") == 416
    assert lib.shmq_layout_fingerprint() == lib.shmq_layout_fingerprint()
