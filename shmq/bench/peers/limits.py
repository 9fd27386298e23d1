"""Rows that measure this machine's floor in the same run as shmq and the peers (no broker,
no queue semantics, no durability): what a Python producer and consumer cannot go below here.

``py-floor`` (produce): the producer loop with a send that only builds the ``shmq.Message``
the shmq row's send takes (a list of them for a batch) and drops it: the highest send rate any
client taking a Message can reach in this harness. Nothing is delivered.

``futex-limit`` (e2e): the producer copies each message into a ring in a shared mapping,
bumps a 32-bit sequence word and FUTEX_WAKEs it; the consumer sleeps in FUTEX_WAIT on that
word (no spin) and copies out what is new. Its latency is the floor of "a Python reader woken
by a futex" under shmq's default wait. The futex calls go straight to libc's syscall through
cffi's ABI mode (as cheap as the C core's calls, without importing it).

``spin-limit`` (e2e): the same ring, but the consumer never sleeps: it spins reading the
sequence word (and the producer makes no wake call). Its latency is the floor of busy-polling
here: the producer's paced loop sleeps between messages (as every row's does), and on this
machine's vCPUs a store made after such a sleep is seen by a reader spinning on another CPU
from 0.2 to ~8 µs later, depending on the host (measured with a C spinner, 2026-12-01).

``page-floor`` (produce): the producer loop with a send that only stores its messages' records
(the size of the CommitLog record the shmq row's local send writes for that body) into NEW
page-cache pages: files of the bench broker's CommitLog size, created fresh in the run's
directory the way the CommitLog creates its own (``files.create_preallocated``: posix_fallocate,
unwritten extents) and mapped shared; a batch is one slice store, and a batch that does not fit
what is left of a file goes whole into the next one (as the append leaves a BLANK and rolls).
Plain stores through the mapping: on this machine no other way to get new file pages writable
(MADV_POPULATE_READ / _WRITE ahead, MAP_POPULATE, pwrite of zeros or of the records) was cheaper
per page (RESULTS, "Session 6, pagefloor"). The files are kept until the run ends, as a
CommitLog's are, so every page is new memory for the page cache. The rate any store that puts
its records in a mapped log can reach from one process here; nothing is delivered.
"""
from __future__ import annotations

import mmap
import os
import shutil
import time

from .base import FuncReceiver, FuncSender, Peer

RING = 8192           # messages the ring holds (the producer waits when it is full)
HEAD = 64             # [0:4] sequence word (futex), [8:16] consumer position
_FUTEX_WAIT, _FUTEX_WAKE = 0, 1
_SYS_FUTEX = {"x86_64": 202, "aarch64": 98}


class FloorPeer(Peer):
    name = "py-floor"
    description = ("limit: the producer loop building the shmq.Message objects the shmq row sends, "
                   "and nothing else (the ceiling of any Message-taking send here; delivers nothing)")

    def skip_reason(self, sc, env):
        if sc.kind != "produce":
            return "a throughput limit (produce only)"
        return super().skip_reason(sc, env)

    @classmethod
    def open_sender(cls, ch, sc, idx):
        from shmq import Message
        topic = "Floor"
        return FuncSender(lambda body: Message(topic, body), lambda bodies: [Message(topic, b) for b in bodies])

    @classmethod
    def open_receiver(cls, ch, sc, idx):
        def recv(timeout):
            time.sleep(timeout)
            return []
        return FuncReceiver(recv)


def _futex():
    """(wait(addr, val, timeout_s), wake(addr)) on a 32-bit word of a shared mapping."""
    from cffi import FFI
    nr = _SYS_FUTEX[os.uname().machine]
    ffi = FFI()
    ffi.cdef("long syscall(long number, ...); struct timespec { long tv_sec; long tv_nsec; };")
    libc = ffi.dlopen(None)
    call, cast = libc.syscall, ffi.cast
    ts = ffi.new("struct timespec *")
    no = cast("void *", 0)

    def wait(addr, val, timeout):
        ts.tv_sec, ts.tv_nsec = int(timeout), int((timeout % 1) * 1e9)
        call(cast("long", nr), addr, cast("int", _FUTEX_WAIT), cast("unsigned int", val), ts, no, cast("int", 0))

    def wake(addr):
        call(cast("long", nr), addr, cast("int", _FUTEX_WAKE), cast("int", 1 << 30), no, no, cast("int", 0))
    return ffi, wait, wake


class FutexPeer(Peer):
    name = "futex-limit"
    description = ("limit: a shared-memory ring, FUTEX_WAKE per message, the consumer asleep in FUTEX_WAIT "
                   "(no spin): the floor of a Python reader woken by a futex")

    def __init__(self):
        self._path = None

    def skip_reason(self, sc, env):
        if sc.kind != "e2e":
            return "a latency limit (e2e only)"
        if os.uname().machine not in _SYS_FUTEX:
            return f"no futex syscall number for {os.uname().machine}"
        if sc.producers != 1 or sc.consumers != 1:
            return "one producer and one consumer only (a single-producer ring)"
        return super().skip_reason(sc, env)

    def setup(self, sc, env, tmpdir):
        self._path = os.path.join(tmpdir, "futex-ring")
        with open(self._path, "wb") as f:
            f.truncate(HEAD + RING * sc.size)
        return self._path

    def teardown(self):
        if self._path is not None and os.path.exists(self._path):
            os.unlink(self._path)

    @staticmethod
    def _open(path):
        fd = os.open(path, os.O_RDWR)
        try:
            mm = mmap.mmap(fd, os.fstat(fd).st_size)
        finally:
            os.close(fd)
        ffi, wait, wake = _futex()
        buf = ffi.from_buffer(mm)
        return mm, buf, ffi.cast("uint32_t *", buf), ffi.cast("int64_t *", buf + 8), wait, wake

    spin = False  # spin-limit: the consumer spins, the producer makes no wake call

    @classmethod
    def open_sender(cls, path, sc, idx):
        mm, buf, seq, cur, _, wake = cls._open(path)
        if cls.spin:
            wake = _no_wake
        size = sc.size
        state = [0]

        def send(body):
            s = state[0]
            while s - cur[0] >= RING:  # full: the consumer is a ring behind
                time.sleep(0.0001)
            at = HEAD + (s % RING) * size
            mm[at:at + size] = body
            s += 1
            state[0] = s
            seq[0] = s & 0xFFFFFFFF  # x86/arm64 stores of one word; the body bytes were written first
            wake(seq)
        return FuncSender(send, None, lambda: (buf, mm))

    @classmethod
    def open_receiver(cls, path, sc, idx):
        mm, buf, seq, cur, wait, _ = cls._open(path)
        size = sc.size
        state = [0]

        if cls.spin:
            wait = _spin_wait

        def recv(timeout):
            seen = state[0]
            s = seq[0]
            if s == seen & 0xFFFFFFFF:
                wait(seq, s, timeout)
                s = seq[0]
            n = (s - seen) & 0xFFFFFFFF
            out = []
            for k in range(seen, seen + n):
                at = HEAD + (k % RING) * size
                out.append(mm[at:at + size])
            state[0] = seen + n
            cur[0] = seen + n
            return out
        return FuncReceiver(recv, lambda: (buf, mm))


def _no_wake(addr) -> None:
    pass


def _spin_wait(seq, val, timeout) -> None:
    """Spin until the sequence word is not ``val`` (at most ``timeout``; the clock is read
    every 256 looks)."""
    deadline = time.monotonic() + timeout
    while True:
        for _ in range(256):
            if seq[0] != val:
                return
        if time.monotonic() >= deadline:
            return


class SpinPeer(FutexPeer):
    name = "spin-limit"
    description = ("limit: the futex-limit ring with a consumer that spins on the sequence word and never sleeps: "
                   "the floor of busy-polling a paced producer here")
    spin = True


def record_size(body: int, topic: str) -> int:
    """Bytes of the CommitLog record the shmq row's local send stores for a ``body``-byte body
    to ``topic``: the fixed part, body, topic and the properties it writes (UNIQ_KEY's 32
    digits and the CLUSTER pair; 267 B for a 100 B body and a 12-character topic)."""
    from shmq.message.layout import RECORD_FIXED
    from shmq.message.names import CLUSTER, UNIQ_KEY
    from shmq.message.properties import encode_properties
    from shmq.store.put import DEFAULT_CLUSTER
    props = encode_properties({UNIQ_KEY: "0" * 32, CLUSTER: DEFAULT_CLUSTER}).encode()
    return RECORD_FIXED + body + len(topic.encode()) + len(props)


class _PageWriter:
    """One producer's records into new pages of its own fresh files (see the module doc)."""

    def __init__(self, ch: dict, idx: int):
        self.dir, self.size, self.record = ch["dir"], ch["file_size"], ch["record"]
        self.idx, self.files, self.pos, self.mm = idx, 0, 0, None
        self.chunk = memoryview(b"x" * (self.record * 1024))  # the bytes of up to 1,024 records
        self._next_file()

    def _next_file(self) -> None:
        from shmq.store import files
        if self.mm is not None:
            self.mm.close()
        path = os.path.join(self.dir, f"p{self.idx}-{self.files:06d}")
        files.create_preallocated(path, self.size)
        self.mm = files.map_file(path, self.size)
        self.files += 1
        self.pos = 0

    def put(self, n: int) -> None:
        nbytes = n * self.record
        if nbytes > len(self.chunk):
            self.chunk = memoryview(b"x" * nbytes)
        if self.pos + nbytes > self.size:
            if nbytes > self.size:
                raise ValueError(f"a batch of {nbytes} bytes does not fit a {self.size}-byte file")
            self._next_file()
        pos = self.pos
        self.mm[pos:pos + nbytes] = self.chunk[:nbytes]  # one memcpy: the page faults are the cost
        self.pos = pos + nbytes

    def close(self) -> None:
        if self.mm is not None:
            self.mm.close()
            self.mm = None


class PageFloorPeer(Peer):
    name = "page-floor"
    description = ("limit: the producer loop storing each message's CommitLog-sized record into NEW page-cache pages "
                   "of fresh preallocated, mapped files of the bench CommitLog's size (delivers nothing)")

    def __init__(self):
        self._dir = None

    def skip_reason(self, sc, env):
        if sc.kind != "produce":
            return "a throughput limit (produce only)"
        return super().skip_reason(sc, env)

    def setup(self, sc, env, tmpdir):
        from ..services import BROKER_SETTINGS
        self._dir = os.path.join(tmpdir, "page-floor")
        os.makedirs(self._dir)
        # the shmq row's topic is Bench<harness pid>x<n>: the same length here
        return {"dir": self._dir, "file_size": int(BROKER_SETTINGS["mappedFileSizeCommitLog"]),
                "record": record_size(sc.size, f"Bench{os.getpid()}x0")}

    def teardown(self):
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    @classmethod
    def open_sender(cls, ch, sc, idx):
        w = _PageWriter(ch, idx)
        put = w.put
        return FuncSender(lambda body: put(1), lambda bodies: put(len(bodies)), w.close)

    @classmethod
    def open_receiver(cls, ch, sc, idx):
        def recv(timeout):
            time.sleep(timeout)
            return []
        return FuncReceiver(recv)
