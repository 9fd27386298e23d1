"""The body of a chaos message: ``<id>|<filler>|<crc32 hex>``. The id is unique per send
attempt (``<actor>.<incarnation>.<seq>``); the filler is a pattern derived from the id
(so its length varies, 16..400 bytes, and a record cut or shifted by a bug does not happen
to line up); the crc32 covers id and filler. A body that does not parse or whose checksum
does not match is *garbage*: the store served bytes that no producer sent."""
from __future__ import annotations

import zlib

SEP = b"|"


def body_for(msg_id: str) -> bytes:
    raw = msg_id.encode()
    seed = zlib.crc32(raw)
    n = 16 + seed % 385
    filler = bytes(48 + (seed + 7 * i) % 75 for i in range(n))   # printable, never SEP
    head = raw + SEP + filler
    return head + SEP + b"%08x" % zlib.crc32(head)


def parse(body: bytes) -> tuple[str | None, bool]:
    """``(id, intact)``: the id the body names (None when there is none) and whether the body
    is exactly what :func:`body_for` makes for that id."""
    first = body.find(SEP)
    if first <= 0:
        return None, False
    try:
        msg_id = body[:first].decode("ascii")
    except UnicodeDecodeError:
        return None, False
    return msg_id, body == body_for(msg_id)
