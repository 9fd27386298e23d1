"""UNIQ_KEY message ids as the Java client forms them (MessageClientIDSetter):

    | IPv4 (4) | pid & 0xFFFF (2) | class-loader hash (4) | ms since the start of this month (4) | counter (2) |

16 bytes as 32 upper-case hex characters. The first 20 characters are fixed per process;
the time and counter parts make ids unique within it (the counter wraps at 65536 within
one millisecond-window base, as in Java). The broker only stores and indexes it."""
from __future__ import annotations

import datetime
import itertools
import os
import random
import socket
import struct
import threading
import time


def local_ipv4() -> bytes:
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("127.0.0.1", 9))  # no packet is sent; picks the loopback source address
            return socket.inet_aton(s.getsockname()[0])
    except OSError:
        return socket.inet_aton("127.0.0.1")


class UniqIdGenerator:
    def __init__(self):
        self._lock = threading.Lock()
        self._reset()
        os.register_at_fork(after_in_child=self._reset)

    def _reset(self) -> None:
        self._prefix = (local_ipv4() + struct.pack(">hi", os.getpid() & 0x7FFF, random.getrandbits(31))).hex().upper()
        self._counter = itertools.count(random.randrange(1 << 16))
        self._month_start = 0.0
        self._next_month = 0.0

    def _month(self, now: float) -> None:
        d = datetime.datetime.fromtimestamp(now)
        start = d.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        nxt = (start + datetime.timedelta(days=32)).replace(day=1)
        self._month_start, self._next_month = start.timestamp(), nxt.timestamp()

    def next(self) -> str:
        now = time.time()
        if now >= self._next_month or now < self._month_start:
            with self._lock:
                self._month(now)
        ms = int((now - self._month_start) * 1000) & 0x7FFFFFFF
        return self._prefix + f"{ms:08X}{next(self._counter) & 0xFFFF:04X}"


    def many(self, n: int) -> list[str]:
        """n ids with one clock read (a batch is sent in one instant anyway)."""
        now = time.time()
        if now >= self._next_month or now < self._month_start:
            with self._lock:
                self._month(now)
        head = self._prefix + f"{int((now - self._month_start) * 1000) & 0x7FFFFFFF:08X}"
        c = self._counter
        return [f"{head}{next(c) & 0xFFFF:04X}" for _ in range(n)]


_default = UniqIdGenerator()


def new_uniq_id() -> str:
    return _default.next()


def new_uniq_ids(n: int) -> list[str]:
    return _default.many(n)
