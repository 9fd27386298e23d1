"""The owner's hand-over: who owned the store before, and stopping them. A starting broker
reads (or makes) the store's nonce, fences the previous control block (every process still
attached to it stops appending) and bumps the generation the new block carries; segment_gc
fences and unlinks a dead owner's segment the same way."""
from __future__ import annotations

import logging
import os
import secrets

import posix_ipc

from shmq.errors import StaleSegment, StoreError, StoreLocked
from shmq.native import ffi, lib

from . import files
from .config import StoreConfig
from .control import ControlBlock, segment_name

log = logging.getLogger("shmq.store")


def read_or_make_nonce(cfg: StoreConfig) -> int:
    path = os.path.join(cfg.root, "nonce")
    try:
        with open(path) as f:
            return int(f.read().strip(), 16)
    except (FileNotFoundError, ValueError):
        nonce = secrets.randbits(63)
        files.write_atomic(path, f"{nonce:016x}\n".encode(), cfg.file_mode, cfg.group)
        return nonce


def bump_generation(cfg: StoreConfig) -> int:
    path = os.path.join(cfg.root, "generation")
    try:
        with open(path) as f:
            gen = int(f.read().strip()) + 1
    except (FileNotFoundError, ValueError):
        gen = 1
    files.write_atomic(path, f"{gen}\n".encode(), cfg.file_mode, cfg.group)
    return gen


def fence_previous(cfg: StoreConfig, nonce: int) -> None:
    """Stop every process still attached to the previous owner's control block: take its
    lock (repairing a dead holder's append on the way) and mark it FENCED. A live holder
    that never lets go means a stopped writer could resume and write: refuse to start."""
    try:
        old = ControlBlock.attach(cfg.root, nonce)
    except StaleSegment:
        unlink_segment(cfg)
        return
    except StoreError as e:
        log.warning("discarding the previous control block of %s: %s", cfg.root, e)
        unlink_segment(cfg)
        return
    try:
        w = ffi.new("shmq_writer *")
        w.ctl = old.ctl
        w.token = lib.shmq_self_token()
        w.lock_timeout_ms = max(cfg.lock_timeout_ms, 1000)
        rc = lib.shmq_lock(w)
        if rc == lib.SHMQ_ETIMEDOUT:
            holder = old.ctl.lock.word >> 32
            raise StoreLocked(f"process {holder} holds the store's append lock and does not release it "
                              f"(stopped?); not starting beside it")
        lib.shmq_fence(old.ctl)  # also wakes every sleeper on it, so they notice
        lib.shmq_unlock(w)
    finally:
        old.close()
    unlink_segment(cfg)


def unlink_segment(cfg: StoreConfig) -> None:
    try:
        posix_ipc.unlink_shared_memory(segment_name(cfg.root))
    except posix_ipc.ExistentialError:
        pass
