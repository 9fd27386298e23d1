"""A worker's held pulls woken by another worker's append through the eventfd the supervisor made
(broker/worker/pull_hold.py ``peer_fds``, layout.h ``pull_armed``): the appending worker writes
the holder's eventfd itself, once per run of appends until the holder looks again, and the
holder's pull-wake thread (kept for every other appender) sleeps through those appends."""
from __future__ import annotations

import asyncio
import os

from shmq.broker.worker.pull_hold import PullHolds, peer_fds
from shmq.native import ffi, lib
from shmq.store import MessageStore

from ..conftest import small_config
from .test_pull_hold import Conn, _until


def _append_as_worker(store, fds: dict[int, int], bit: int, n: int = 1, qid: int = 0) -> None:
    """A forked child that appends as worker ``bit`` of the same broker."""
    pid = os.fork()
    if pid == 0:
        try:
            lib.shmq_set_data_wake_bit(bit)
            lib.shmq_set_pull_peers(ffi.new("int[32]", [fds.get(b, -1) for b in range(32)]), 32)
            for _ in range(n):
                store.put("T", qid, b"x")
        finally:
            os._exit(0)
    assert os.waitpid(pid, 0)[1] == 0


def test_peer_fds_parse():
    assert peer_fds("1:7,2:9") == {1: 7, 2: 9} and peer_fds(None) is None and peer_fds("") is None


def test_another_workers_append_writes_the_holders_eventfd(store_root):
    fds = {1: os.eventfd(0, os.EFD_NONBLOCK), 2: os.eventfd(0, os.EFD_NONBLOCK)}

    async def main():
        loop = asyncio.get_running_loop()
        store = MessageStore.open(small_config(store_root))
        holds = PullHolds(store, loop, own_bit=2, peer_fds=fds)
        pos = store.cb.ctl.pos
        try:
            calls: list = []
            holds.hold("T", 0, 0, 30.0, calls.append, Conn())
            assert pos.pull_armed == 1 << 2 and not pos.pull_signaled
            _append_as_worker(store, fds, 1, n=3)
            assert pos.pull_signaled == 1 << 2  # three appends, one signal
            assert await _until(lambda: calls) and calls == [True]
            assert not pos.pull_signaled  # cleared by the holder before it looked
            holds.hold("T", 0, 3, 30.0, calls.append, Conn())
            _append_as_worker(store, fds, 1)
            assert await _until(lambda: len(calls) == 2)
            assert await _until(lambda: not holds._holds)
            # nothing held: the next wake-up disarms, and appends then signal nobody
            _append_as_worker(store, fds, 1)
            assert await _until(lambda: not pos.pull_armed)
            _append_as_worker(store, fds, 1)
            await asyncio.sleep(0.05)
            assert not pos.pull_signaled
        finally:
            holds.close()
            store.close()
    try:
        asyncio.run(main())
    finally:
        for fd in fds.values():
            os.close(fd)


def test_an_append_by_anyone_else_still_wakes_through_the_thread(store_root):
    fds = {1: os.eventfd(0, os.EFD_NONBLOCK), 2: os.eventfd(0, os.EFD_NONBLOCK)}

    async def main():
        loop = asyncio.get_running_loop()
        store = MessageStore.open(small_config(store_root))
        holds = PullHolds(store, loop, own_bit=2, peer_fds=fds)
        try:
            calls: list = []
            holds.hold("T", 0, 0, 30.0, calls.append, Conn())
            pid = os.fork()
            if pid == 0:  # a local producer: no wake bit, wakes every sleeper
                try:
                    lib.shmq_set_data_wake_bit(-1)
                    store.put("T", 0, b"x")
                finally:
                    os._exit(0)
            assert os.waitpid(pid, 0)[1] == 0
            assert await _until(lambda: calls, 3.0) and calls == [True]
            assert not store.cb.ctl.pos.pull_signaled
        finally:
            holds.close()
            store.close()
    try:
        asyncio.run(main())
    finally:
        for fd in fds.values():
            os.close(fd)


def test_a_run_of_appends_wakes_the_holder_after_its_last(store_root):
    """The worker's C send path defers the peers' wake-up over one read's run of appends
    (send_fast.py, core_util.c ``shmq_pull_peers_defer``): the holder is woken once the run is
    all stored, not at its first append, and is woken even so."""
    fds = {1: os.eventfd(0, os.EFD_NONBLOCK), 2: os.eventfd(0, os.EFD_NONBLOCK)}

    async def main():
        loop = asyncio.get_running_loop()
        store = MessageStore.open(small_config(store_root))
        holds = PullHolds(store, loop, own_bit=2, peer_fds=fds)
        pos = store.cb.ctl.pos
        try:
            calls: list = []
            holds.hold("T", 0, 0, 30.0, calls.append, Conn())
            loop.remove_reader(fds[2])  # (this test reads the eventfd itself, below)
            pid = os.fork()
            if pid == 0:  # worker 1 serving one read of three sends
                code = 1
                try:
                    lib.shmq_set_data_wake_bit(1)
                    lib.shmq_set_pull_peers(ffi.new("int[32]", [fds.get(b, -1) for b in range(32)]), 32)
                    lib.shmq_pull_peers_defer(store.cb.ctl, 1)
                    for _ in range(3):
                        store.put("T", 0, b"x")
                    during = pos.pull_signaled
                    lib.shmq_pull_peers_defer(store.cb.ctl, 0)
                    code = 0 if (during, pos.pull_signaled) == (0, 1 << 2) else 2
                finally:
                    os._exit(code)
            assert os.waitpid(pid, 0)[1] == 0  # not signalled during the run, signalled after it
            assert os.eventfd_read(fds[2]) == 1  # one write, at the run's end
            loop.add_reader(fds[2], holds._woken)
            os.eventfd_write(fds[2], 1)
            assert await _until(lambda: calls) and calls == [True]
        finally:
            holds.close()
            store.close()
    try:
        asyncio.run(main())
    finally:
        for fd in fds.values():
            os.close(fd)
