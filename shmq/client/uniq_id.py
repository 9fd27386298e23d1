"""UNIQ_KEY message ids as the Java client forms them (MessageClientIDSetter):

    | IPv4 (4) | pid & 0xFFFF (2) | class-loader hash (4) | ms since the start of this month (4) | counter (2) |

16 bytes as 32 upper-case hex characters; the time part is the low 32 bits of the difference
(Java's int cast). The first 20 characters are fixed per process;
the time and counter parts make ids unique within it (the counter wraps at 65536 within
one millisecond-window base, as in Java). The broker only stores and indexes it."""
from __future__ import annotations

import datetime
import os
import random
import socket
import struct
import threading
import time

from shmq.native import _remote, ffi, lib


def local_ipv4() -> bytes:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("127.0.0.1", 9))  # no packet is sent; picks the loopback source address
            return socket.inet_aton(s.getsockname()[0])
    except OSError:
        return socket.inet_aton("127.0.0.1")


class UniqIdGenerator:
    """The process's one id source. The ids are drawn in C (``shmq_uniq_ids``, also inside
    the local send's single C call, ``shmq_put_local``) from one counter for every thread;
    Python only sets the prefix (at start and after fork) and the month window."""

    def __init__(self):
        self._lock = threading.Lock()
        self.c = ffi.new("shmq_uniq *")
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        prefix = (local_ipv4() + struct.pack(">hi", os.getpid() & 0x7FFF, random.getrandbits(31))).hex().upper()
        self.c.prefix = prefix.encode()
        self.c.counter = random.randrange(1 << 16)
        self.roll()

    def roll(self) -> None:
        """Set the month window around now (the C side answers SHMQ_EMONTH outside it)."""
        with self._lock:
            d = datetime.datetime.fromtimestamp(time.time())
            start = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            nxt = (start + datetime.timedelta(days=32)).replace(day=1)
            self.c.month_start_ms = int(start.timestamp() * 1000)
            self.c.next_month_ms = int(nxt.timestamp() * 1000)

    def many(self, n: int) -> list[str]:
        out = ffi.new("char[]", 32 * n)
        while lib.shmq_uniq_ids(self.c, n, out) == lib.SHMQ_EMONTH:
            self.roll()
        raw = ffi.unpack(out, 32 * n).decode()
        return [raw[i:i + 32] for i in range(0, 32 * n, 32)]

    def next(self) -> str:
        """One id (``new_uniq_id``: drawn in C with the GIL held, native/hot_remote.c says why)."""
        u = _one()
        while u.__class__ is int:  # SHMQ_EMONTH: the clock left this month's window
            self.roll()
            u = _one()
        return u


_default = UniqIdGenerator()
_remote.bind(int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_uniq_ids"))), int(ffi.cast("uintptr_t", _default.c)))
_one = _remote.uniq


def new_uniq_id() -> str:
    return _default.next()


def new_uniq_ids(n: int) -> list[str]:
    return _default.many(n)


def generator() -> UniqIdGenerator:
    """The process's generator (the local send hands its C struct to the append)."""
    return _default
