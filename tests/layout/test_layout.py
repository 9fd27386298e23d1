"""Every constant the Python side uses matches the C layout (shmq/native/layout.h is the
source; shmq/message/layout.py is its Python mirror)."""
import struct
import zlib

from shmq.message import layout
from shmq.native import ffi, lib
from shmq.store.consume_queue import ENTRY, ENTRY_SIZE

_OFFSETS = ("TOTALSIZE", "MAGIC", "BODYCRC", "QUEUEID", "FLAG", "QUEUEOFFSET", "PHYSOFFSET", "SYSFLAG", "BORNTS",
            "BORNHOST", "STORETS", "STOREHOST", "RECONSUME", "PREPARED", "BODYLEN")


def test_record_offsets_match_layout_h():
    for name in _OFFSETS:
        assert getattr(layout, "R_" + name) == getattr(lib, "SHMQ_R_" + name), name
    assert layout.MESSAGE_MAGIC == lib.SHMQ_MESSAGE_MAGIC == 0xDAA320A7
    assert layout.BLANK_MAGIC == lib.SHMQ_BLANK_MAGIC == 0xCBD43194
    assert layout.RECORD_FIXED == lib.SHMQ_RECORD_FIXED == 91
    assert layout.BLANK_MIN == lib.SHMQ_BLANK_MIN
    assert layout.TOPIC_MAX == lib.SHMQ_TOPIC_MAX
    assert layout.PROPS_MAX == lib.SHMQ_PROPS_MAX
    assert layout.FLAG_COMPRESSED == lib.SHMQ_FLAG_COMPRESSED
    assert layout.HEADER.size == layout.R_BODY == lib.SHMQ_R_BODYLEN + 4


def test_header_struct_fields_sit_at_the_offsets():
    """Pack distinct values and find each at its R_* offset (the struct format and the offset
    table are written separately; this ties them together)."""
    vals = (1, 2, 3, 4, 5, 6, 7, 8, 9, b"HOSTBORN", 10, b"HOSTSTOR", 11, 12, 13)
    raw = layout.HEADER.pack(*vals)
    at = {name: getattr(layout, "R_" + name) for name in _OFFSETS}
    assert struct.unpack_from(">i", raw, at["TOTALSIZE"])[0] == 1
    assert struct.unpack_from(">i", raw, at["QUEUEID"])[0] == 4
    assert struct.unpack_from(">q", raw, at["PHYSOFFSET"])[0] == 7
    assert raw[at["BORNHOST"]:at["BORNHOST"] + 8] == b"HOSTBORN"
    assert raw[at["STOREHOST"]:at["STOREHOST"] + 8] == b"HOSTSTOR"
    assert struct.unpack_from(">q", raw, at["PREPARED"])[0] == 12
    assert struct.unpack_from(">i", raw, at["BODYLEN"])[0] == 13


def test_consume_queue_entry():
    assert ENTRY.size == ENTRY_SIZE == lib.SHMQ_CQ_ENTRY_SIZE == 20
    raw = ENTRY.pack(0x0102030405060708, 0x11121314, 0x2122232425262728)
    assert raw[lib.SHMQ_CQ_PHYS:lib.SHMQ_CQ_PHYS + 8] == bytes.fromhex("0102030405060708")
    assert raw[lib.SHMQ_CQ_SIZE:lib.SHMQ_CQ_SIZE + 4] == bytes.fromhex("11121314")
    assert raw[lib.SHMQ_CQ_TAG:lib.SHMQ_CQ_TAG + 8] == bytes.fromhex("2122232425262728")


def test_batch_entry_fixed_bytes():
    from shmq.message.batch import ENTRY_FIXED
    assert lib.SHMQ_BATCH_ENTRY_FIXED == ENTRY_FIXED == 22


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


def test_fingerprint_is_the_crc_of_the_geometry():
    """The fingerprint recomputed here from cffi's view of the structs (independent of the C
    function): a build whose struct geometry differs gets a different fingerprint."""
    parts = (lib.SHMQ_LAYOUT_VERSION, ffi.sizeof("shmq_ctl_header"), ffi.sizeof("shmq_owner"),
             ffi.sizeof("shmq_lockword"), ffi.sizeof("shmq_intent"), ffi.sizeof("shmq_positions"),
             ffi.sizeof("shmq_queue_slot"), ffi.sizeof("shmq_offset_slot"), ffi.offsetof("shmq_ctl", "queues"),
             ffi.offsetof("shmq_ctl", "pos"), ffi.offsetof("shmq_positions", "flushed_pos"),
             ffi.offsetof("shmq_queue_slot", "topic"), ffi.offsetof("shmq_offset_slot", "key"),
             ffi.sizeof("void *"))
    assert lib.shmq_layout_fingerprint() == zlib.crc32(struct.pack(f"={len(parts)}I", *parts))


def test_c_status_table_names_the_header_codes():
    from shmq.errors import C_STATUS_NAMES, MessageTooLarge, error_for_status
    for value, name in C_STATUS_NAMES.items():
        assert getattr(lib, name) == value, name
    e = error_for_status(lib.SHMQ_ETOOBIG, size=10, limit=5)
    assert isinstance(e, MessageTooLarge) and (e.size, e.limit) == (10, 5)


def test_property_names_and_separators_match_layout_h():
    """The property names the C core reads and writes (TAGS for the tag hash, KEYS and UNIQ_KEY
    for the index, UNIQ_KEY for the id it draws) and the two separators are defined once in C,
    in layout.h; they must be the ones shmq.message writes and reads."""
    import pathlib
    import re

    import shmq.native
    from shmq.message import names, properties
    text = (pathlib.Path(shmq.native.__file__).parent / "layout.h").read_text()
    strings = dict(re.findall(r'^#define (SHMQ_PROP_\w+) "([^"]*)"$', text, re.M))
    chars = {k: chr(int(v, 8)) for k, v in re.findall(r"^#define (SHMQ_\w+_SEP) '\\(\d{3})'$", text, re.M)}
    assert strings == {"SHMQ_PROP_TAGS": names.TAGS, "SHMQ_PROP_KEYS": names.KEYS,
                       "SHMQ_PROP_UNIQ_KEY": names.UNIQ_KEY, "SHMQ_PROP_WAIT": names.WAIT,
                       "SHMQ_PROP_CLUSTER": names.CLUSTER, "SHMQ_PROP_DELAY": names.DELAY,
                       "SHMQ_PROP_TRAN_MSG": names.TRAN_MSG}
    (head,) = re.findall(r'^#define SHMQ_TIMER_NAME_HEAD "([^"]*)"$', text, re.M)
    timers = [v for k, v in vars(names).items() if k.startswith("TIMER_") and k != "TIMER_TOPIC"]
    assert timers and all(t.startswith(head) for t in timers)
    (topic,) = re.findall(r'^#define SHMQ_TIMER_TOPIC "([^"]*)"$', text, re.M)
    assert topic == names.TIMER_TOPIC  # the append's notify_timer wakes the timer service on appends into it
    assert chars == {"SHMQ_NAME_VALUE_SEP": properties.NAME_VALUE_SEP,
                     "SHMQ_PROPERTY_SEP": properties.PROPERTY_SEP}
