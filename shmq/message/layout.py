"""The CommitLog record, in Python: the mirror of ``shmq/native/layout.h`` (the document of
record, with the box diagram). tests/layout/test_layout.py checks every constant here against
the compiled header, so the two cannot drift apart.

A record (big-endian, IPv4 hosts)::

    off  width  field
      0    4    TOTALSIZE        = RECORD_FIXED + body + topic + properties
      4    4    MAGICCODE        MESSAGE_MAGIC (a BLANK filler: BLANK_MAGIC)
      8    4    BODYCRC          crc32(body) & 0x7FFFFFFF
     12    4    QUEUEID
     16    4    FLAG             the user's flag
     20    8    QUEUEOFFSET      index in the ConsumeQueue (0 for prepared / rollback)
     28    8    PHYSICALOFFSET   the record's own position in the log
     36    4    SYSFLAG          the FLAG_* and TX_* bits below
     40    8    BORNTIMESTAMP    ms
     48    8    BORNHOST         IPv4 (4) + port int32
     56    8    STORETIMESTAMP   ms
     64    8    STOREHOST        IPv4 (4) + port int32
     72    4    RECONSUMETIMES
     76    8    PREPAREDTXOFFSET
     84    4+b  BODYLEN + BODY
   88+b    1+t  TOPICLEN + TOPIC
 89+b+t    2+p  PROPLEN + PROPERTIES
"""
from __future__ import annotations

import struct
import zlib

MESSAGE_MAGIC = 0xDAA320A7
BLANK_MAGIC = 0xCBD43194
#: the bytes of a record that are not body, topic or properties (IPv4 hosts)
RECORD_FIXED = 91
#: a BLANK filler is TOTALSIZE + MAGIC
BLANK_MIN = 8
TOPIC_MAX = 127
PROPS_MAX = 32767

# field offsets (SHMQ_R_*)
R_TOTALSIZE = 0
R_MAGIC = 4
R_BODYCRC = 8
R_QUEUEID = 12
R_FLAG = 16
R_QUEUEOFFSET = 20
R_PHYSOFFSET = 28
R_SYSFLAG = 36
R_BORNTS = 40
R_BORNHOST = 48
R_STORETS = 56
R_STOREHOST = 64
R_RECONSUME = 72
R_PREPARED = 76
R_BODYLEN = 84
#: where the body starts (after BODYLEN)
R_BODY = R_BODYLEN + 4

#: the fixed head, TOTALSIZE .. BODYLEN, with each host as its 8 raw bytes (IPv4 + port):
#: total magic crc queueid flag queueoffset physoffset sysflag bornts bornhost storets
#: storehost reconsume prepared bodylen
HEADER = struct.Struct(">iIIiiqqiq8sq8siqi")
assert HEADER.size == R_BODY
I16 = struct.Struct(">h")
I32 = struct.Struct(">i")
HOST = struct.Struct(">4si")   # an 8-byte host: IPv4, port

# sysFlag bits (MessageSysFlag)
FLAG_COMPRESSED = 0x1
FLAG_MULTI_TAGS = 0x2
TX_TYPE_MASK = 0xC
TX_NOT_TYPE = 0x0
TX_PREPARED_TYPE = 0x4
TX_COMMIT_TYPE = 0x8
TX_ROLLBACK_TYPE = 0xC
#: transaction types stored without a ConsumeQueue entry (and with queue offset 0)
TX_NO_CQ = (TX_PREPARED_TYPE, TX_ROLLBACK_TYPE)
FLAG_BORNHOST_V6 = 0x10
FLAG_STOREHOST_V6 = 0x20
FLAG_INNER_BATCH = 0x80


def has_cq_entry(sysflag: int) -> bool:
    """Whether a record with this sysFlag gets a ConsumeQueue entry (not prepared, not rollback)."""
    return sysflag & TX_TYPE_MASK not in TX_NO_CQ


def masked_crc32(data) -> int:
    """``UtilAll.crc32``: zlib's CRC-32 with the top bit cleared (a positive Java int). A
    record's BODYCRC and REGISTER_BROKER's bodyCrc32 both use it."""
    return zlib.crc32(data) & 0x7FFFFFFF
