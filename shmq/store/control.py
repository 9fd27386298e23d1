"""The shared control block: one POSIX shared-memory object per store (layout in
``shmq/native/layout.h``).

The owner (the broker) creates it at every start under a new generation, after fencing the
previous one, so processes still attached to an old segment fail their next append with
StaleSegment instead of writing beside the new owner. Everything in it is a cache of the
files: a reboot, a removed segment, or a boot-id or store-nonce mismatch means rebuild.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import socket
import struct

import posix_ipc

from shmq.errors import StaleSegment, StoreCorrupt, StoreError
from shmq.native import ffi, lib

from .config import StoreConfig

#: A queue slot's next_offset and min_offset, adjacent at its start (layout.h shmq_queue_slot),
#: read in one native-order unpack per used slot (each an aligned 8-byte load, as cffi's is)
_NEXT_MIN = struct.Struct("qq")
assert (ffi.offsetof("shmq_queue_slot", "next_offset"), ffi.offsetof("shmq_queue_slot", "min_offset")) == (0, 8)


def segment_name(root: str) -> str:
    """The shm name of a store: derived from its absolute path, so every process that names
    the same directory finds the same segment."""
    digest = hashlib.sha1(os.path.abspath(root).encode()).hexdigest()[:24]
    return f"/shmq.{digest}"


def boot_id() -> int:
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            text = f.read().strip()
    except OSError:
        return 0
    return struct.unpack("<Q", hashlib.sha1(text.encode()).digest()[:8])[0]


def ctl_size(queue_capacity: int, offset_capacity: int) -> int:
    size = (lib.SHMQ_QUEUE_TABLE_OFFSET + queue_capacity * ffi.sizeof("shmq_queue_slot")
            + offset_capacity * ffi.sizeof("shmq_offset_slot"))
    page = mmap.PAGESIZE
    return (size + page - 1) // page * page


def _ip_to_int(ip: str) -> int:
    return struct.unpack(">I", socket.inet_aton(ip))[0]


class ControlBlock:
    """A mapping of the control block. ``ctl`` is the cffi ``shmq_ctl *``."""

    def __init__(self, name: str, mm: mmap.mmap):
        self.name = name
        self._mm = mm
        self._buf = ffi.from_buffer(mm)
        self.ctl = ffi.cast("shmq_ctl *", self._buf)
        self.offsets = lib.shmq_offset_table(self.ctl)
        # a used slot's name, by index (see _used_slots)
        self._queue_names: dict[int, tuple[str, int]] = {}
        self._offset_names: dict[int, tuple[str, int]] = {}

    # ---- creation and attachment -------------------------------------------------------
    @classmethod
    def create(cls, cfg: StoreConfig, nonce: int, generation: int) -> "ControlBlock":
        """Create a fresh segment for an owner (replacing any segment of that name: old
        mappers keep theirs, which the caller has fenced)."""
        name = segment_name(cfg.root)
        size = ctl_size(cfg.queue_capacity, cfg.offset_capacity)
        try:
            posix_ipc.unlink_shared_memory(name)
        except posix_ipc.ExistentialError:
            pass
        shm = posix_ipc.SharedMemory(name, posix_ipc.O_CREX, mode=cfg.file_mode, size=size)
        try:
            os.fchmod(shm.fd, cfg.file_mode)  # the umask must not weaken the mode
            if cfg.group is not None:
                import grp
                os.fchown(shm.fd, -1, grp.getgrnam(cfg.group).gr_gid)
            mm = mmap.mmap(shm.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            shm.close_fd()
        cb = cls(name, mm)
        c = cb.ctl
        rc = lib.shmq_ctl_init(c, size, cfg.queue_capacity, cfg.offset_capacity)
        if rc:
            raise StoreError(f"cannot initialise control block (code {rc})")
        cb.offsets = lib.shmq_offset_table(c)  # its place depends on the queue capacity just set
        h = c.header
        h.store_nonce = nonce
        h.boot_id = boot_id()
        h.file_size = cfg.mapped_file_size_commitlog
        h.cq_entries_per_file = cfg.cq_entries_per_file
        h.max_message_size = cfg.max_message_size
        root = cfg.root.encode()
        if len(root) >= lib.SHMQ_ROOT_MAX:
            raise StoreError(f"store path longer than {lib.SHMQ_ROOT_MAX - 1} bytes: {cfg.root}")
        ffi.memmove(c.root, root + b"\0", len(root) + 1)
        o = c.owner
        o.generation = generation
        o.pid = os.getpid()
        o.starttime = lib.shmq_self_token() & 0xFFFFFFFF
        o.store_ip = _ip_to_int(cfg.store_host[0])
        o.store_port = cfg.store_host[1]
        o.flush_mode = cfg.flush_disk_type
        o.role = cfg.broker_role
        o.ha_fallbehind_max = cfg.ha_slave_fallbehind_max
        o.sync_flush_timeout_ms = cfg.sync_flush_timeout_ms
        o.index_hash_slots = cfg.max_hash_slot_num
        o.index_num = cfg.max_index_num
        return cb

    @classmethod
    def attach(cls, root: str, nonce: int | None = None) -> "ControlBlock":
        """Map an existing segment and check that it belongs to this store and this build.
        Raises StaleSegment when there is none or it is not the store's current one."""
        name = segment_name(root)
        try:
            shm = posix_ipc.SharedMemory(name)
        except posix_ipc.ExistentialError as e:
            raise StaleSegment(f"no control block for {root}: is a broker running on it?") from e
        except posix_ipc.PermissionsError as e:
            raise StoreError(f"no permission to map the control block of {root}") from e
        try:
            size = os.fstat(shm.fd).st_size
            if size < lib.SHMQ_QUEUE_TABLE_OFFSET:
                raise StaleSegment(f"control block of {root} is truncated ({size} bytes)")
            mm = mmap.mmap(shm.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        finally:
            shm.close_fd()
        cb = cls(name, mm)
        try:
            cb.check(nonce)
        except BaseException:
            cb.close()
            raise
        return cb

    def check(self, nonce: int | None) -> None:
        h = self.ctl.header
        if h.magic != lib.SHMQ_CTL_MAGIC or h.layout_version != lib.SHMQ_LAYOUT_VERSION:
            raise StoreCorrupt(f"{self.name}: not a shmq control block of layout {lib.SHMQ_LAYOUT_VERSION}")
        if h.fingerprint != lib.shmq_layout_fingerprint():
            raise StoreCorrupt(f"{self.name}: made by a build with another struct layout")
        if h.ctl_size != len(self._mm) or h.ctl_size != ctl_size(h.queue_capacity, h.offset_capacity):
            raise StoreCorrupt(f"{self.name}: size does not match its header")
        if nonce is not None and h.store_nonce != nonce:
            raise StaleSegment(f"{self.name}: belongs to another store (nonce mismatch)")
        if h.boot_id != boot_id():
            raise StaleSegment(f"{self.name}: left from before a reboot")

    # ---- owner identity -----------------------------------------------------------------
    @property
    def state(self) -> int:
        return self.ctl.owner.state

    @property
    def generation(self) -> int:
        return self.ctl.owner.generation

    def owner_alive(self) -> bool:
        o = self.ctl.owner
        return bool(lib.shmq_pid_alive((o.pid << 32) | o.starttime))

    def set_state(self, state: int) -> None:
        self.ctl.owner.state = state

    # ---- positions ------------------------------------------------------------------------
    @property
    def commit_pos(self) -> int:
        return lib.shmq_load_i64(ffi.addressof(self.ctl.pos, "commit_pos"))

    @property
    def flushed_pos(self) -> int:
        return lib.shmq_load_i64(ffi.addressof(self.ctl.pos, "flushed_pos"))

    @property
    def min_pos(self) -> int:
        return self.ctl.pos.min_pos

    def _used_slots(self, first, cap: int) -> tuple[bytes, int, int]:
        """The state bytes of a slot table (``first``: its slot 0), one a slot, in one strided
        copy (a walk of every slot through cffi took ~5 ms for the 16,384 queue slots, which
        the flush thread paid every second on an idle broker, the metrics tail every pass);
        and where slot 0 starts in the mapping, and a slot's size."""
        size = ffi.sizeof(first)
        start = int(ffi.cast("uintptr_t", ffi.addressof(first))) - int(ffi.cast("uintptr_t", self._buf))
        at = start + ffi.offsetof(ffi.typeof(first), "state")
        with memoryview(self._mm) as mv, mv[at:at + cap * size:size] as states:
            return states.tobytes(), start, size

    def iter_queue_slots(self):
        """(index, topic, queue id, next offset, min offset) of every used slot. A slot is
        never freed, and its topic and queue id are written before its state byte says used
        (shmq_queue_create): they are read once and kept; the two offsets are read each time."""
        c = self.ctl
        states, start, size = self._used_slots(c.queues[0], c.header.queue_capacity)
        names, mm, unpack = self._queue_names, self._mm, _NEXT_MIN.unpack_from
        i = states.find(1)
        while i >= 0:
            nm = names.get(i)
            if nm is None:
                s = c.queues[i]
                nm = names[i] = (ffi.unpack(s.topic, s.topic_len).decode(), s.queue_id)
            nxt, mn = unpack(mm, start + i * size)
            yield i, nm[0], nm[1], nxt, mn
            i = states.find(1, i + 1)

    def iter_offset_slots(self):
        """(index, key, queue id, offset) of every used consumer-offset slot (kept as the
        queue slots are: shmq_offset_create)."""
        t = self.offsets
        states = self._used_slots(t[0], self.ctl.header.offset_capacity)[0]
        names = self._offset_names
        i = states.find(1)
        while i >= 0:
            s = t[i]
            nm = names.get(i)
            if nm is None:
                nm = names[i] = (ffi.unpack(s.key, s.key_len).decode(), s.queue_id)
            yield i, nm[0], nm[1], s.offset
            i = states.find(1, i + 1)

    def close(self) -> None:
        if self._mm is None:
            return
        # the C helper threads sleeping in this block (confirm and pull-wake bridges) end first:
        # one waking after the unmap would write to a page that is gone (SIGSEGV at shutdown)
        lib.shmq_helpers_stop(self.ctl)
        self.ctl = None
        self.offsets = None
        ffi.release(self._buf)
        self._buf = None
        self._mm.close()
        self._mm = None

    def unlink(self) -> None:
        try:
            posix_ipc.unlink_shared_memory(self.name)
        except posix_ipc.ExistentialError:
            pass
