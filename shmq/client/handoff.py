"""Handing pulled messages from the client's loop thread to consume threads.

RocketMQ's ConsumeMessageService: listeners run on a pool of consume threads, never on the
IO thread. A caught-up TCP consumer hands over one pulled batch per message, so the hand-over
is the consumer's cost per message. Woken while the loop thread still held the GIL, a consume
thread ran, found the GIL taken, slept on it and was woken again when the loop thread dropped
it (perf on such a consumer: a third of its time in those switches). Here the loop thread
only queues the task and counts the wake-up it owes; its selector pays the owed wake-ups in
the same C call that then sleeps in epoll_wait (``native/handoff.c``, called by cffi with the
GIL released), so the woken thread finds the GIL free: one switch per hand-over. And one
thread per turn, not per task: the tasks of one turn (a read with several queues' answers)
wake one thread, which takes the next task when it ends one, and none while a thread woken
before has not looked at the queue yet; whatever is still queued 1 ms later gets a thread of
its own if no task was taken meanwhile (a blocked listener's neighbours), else is looked at
again 1 ms later (a backlog the awake thread is working through: another thread would only
wait on the GIL).

``HandoffSelector`` is the client loop's selector (an ``EpollSelector`` whose ``select``
takes the C path only in a turn that owes wake-ups); ``ClientLoop`` is the loop over it, every
ClientInstance's, whose own turn calls that C wait every time (no ``select`` call, no list of
events made); ``ConsumePool`` is the threads. A task
submitted from any other thread (a consume thread's retry, the local pull thread) is posted
at once.
"""
from __future__ import annotations

import asyncio
import collections
import errno
import logging
import os
import selectors
import sys
import threading
from asyncio import base_events
from heapq import heappop
from time import monotonic as _monotonic

from shmq.native import ffi, lib

log = logging.getLogger("shmq.client.push")

# the least time between a look's mark and the look itself that tells a stuck thread from one
# that had no CPU or GIL to take a task yet: half of native/handoff.c's SPREAD_US
_LOOK_MIN_S = 0.0005
MAX_POOLS = 8       # pools of one client loop whose wake-ups wait for its sleep; more post at once
EPOLL_BATCH = 64    # native/handoff.c's; level-triggered, the rest comes at the next select
IDLE_WAIT_MS = 1000  # a consume thread looks at its stop flag at least this often


class HandoffSelector(selectors.EpollSelector):
    """The client loop's selector: ``select`` pays the wake-ups its loop's turn owes (see the
    module docstring) and then waits as ``EpollSelector.select`` does, with the same result."""

    def __init__(self):
        super().__init__()
        self._slots = ffi.new(f"shmq_handoff *[{MAX_POOLS}]")
        # every word ever attached stays referenced here, and a slot is never reused: the loop
        # thread may be reading a slot (in C, without the GIL) while another thread detaches it
        self._keep: list = []
        self._pools: list = []  # each kept word's ConsumePool (the spare tasks' look)
        self._spread = ffi.new("int32_t[1]")  # set by the C wait: spare tasks to look at (respread)
        self._fds = ffi.new(f"int[{EPOLL_BATCH}]")
        self._evs = ffi.new(f"uint32_t[{EPOLL_BATCH}]")
        self._wait = lib.shmq_handoff_epoll  # bound once: a lib attribute is a cffi lookup per read
        self._epfd = self._selector.fileno()  # the stdlib's epoll object's, fixed for its life
        self.owed = False  # some pool's posts > 0 (set by ConsumePool.submit, on the loop thread)

    def attach(self, h, pool: "ConsumePool") -> bool:
        """Let ``h``'s owed wake-ups (``pool``'s) wait for this loop's next sleep; False when full."""
        if len(self._keep) == MAX_POOLS:
            return False
        self._slots[len(self._keep)] = h
        self._keep.append(h)
        self._pools.append(pool)
        return True

    def respread(self) -> None:
        """The look at the spare tasks (handoff.c's ``shmq_handoff_epoll``), SPREAD_US after the
        first of them. While the awake consume threads are stuck (no task taken since the look
        was set: the queue's head is still the one ``marks`` noted; a listener that blocks),
        each spare task still queued gets a thread woken at the C wait about to run. While they
        are taking tasks (a backlog behind listeners that use the CPU: the GIL lets one of them
        run at a time, so another thread would only wait on it, then find the queue empty and
        sleep again; perf on the sync + PushConsumer row: a fifth of the loop's wake-up calls
        were these, 3 threads each), the look is set again SPREAD_US later instead (``due`` 0:
        the C wait sets it anew)."""
        for h, pool in zip(self._keep, self._pools):
            spare = h.spare
            if spare:
                tasks = pool._tasks
                n = len(tasks)
                if not n:
                    h.spare = 0
                elif tasks[0] is not pool.mark or _monotonic() - pool.marked < _LOOK_MIN_S:
                    # (the second: the mark was late, the GIL held by the thread taking the
                    # tasks, so the look came too soon after it to tell)
                    pool.mark = tasks[0]
                    h.spare = n if n < spare else spare
                    h.due = 0
                else:
                    h.force = n if n < spare else spare
                    h.spare = 0

    def marks(self) -> None:
        """A look at spare tasks was set by the last C wait (``*spread`` 3): the task at the
        queue's head now, which ``respread`` compares with at the look (tasks are taken from the
        head and added at the tail, each a new tuple, held here: a task taken meanwhile shows as
        another head; no count a task, which would cost every task a few hundred instructions)."""
        for h, pool in zip(self._keep, self._pools):
            if h.spare:
                tasks = pool._tasks
                pool.mark = tasks[0] if tasks else None
                pool.marked = _monotonic()

    def look(self, spread: int) -> None:
        """What the last C wait asked of the spare tasks (``*spread``): 1 their look now, 3 a
        look just set (its mark), 2 a look not due yet (nothing)."""
        if spread == 1:
            self.respread()
        elif spread == 3:
            self.marks()

    def detach(self, h) -> None:
        for i, kept in enumerate(self._keep):
            if kept == h:
                self._slots[i] = ffi.NULL

    def select(self, timeout=None):
        spread = self._spread[0]  # (the C wait's: 1 look at the spare tasks now, 2 later, 3 set)
        if not self.owed and not spread:
            return super().select(timeout)
        if spread:
            self.look(spread)
        self.owed = False
        # This runs once per pulled message of a caught-up TCP consumer: no min / max / ceil
        # calls (a builtin's argument parsing is ~800 instructions), and the usual single event
        # without a range loop. EpollSelector.select's rounding: up to the next millisecond, so
        # a timer is not missed (int() truncates a positive float; +1 unless already whole).
        if timeout is None:
            ms = -1
        elif timeout <= 0:
            ms = 0
        else:
            ms = int(timeout * 1e3)
            if ms < timeout * 1e3:
                ms += 1
        keys = self._fd_to_key  # the stdlib's own fd -> key map
        # (handoff.c clamps the batch to 1..EPOLL_BATCH)
        n = self._wait(self._epfd, self._slots, len(self._keep), ms, self._fds, self._evs, len(keys), self._spread)
        if n == 1:
            key = keys.get(self._fds[0])
            if not key:
                return []
            event = self._evs[0]  # EpollSelector.select's mapping, as below
            return [(key, ((_W if event & ~_EPOLLIN else 0) | (_R if event & ~_EPOLLOUT else 0)) & key.events)]
        if n < 0:
            if n == -errno.EINTR:
                return []
            raise OSError(-n, os.strerror(-n))
        ready = []
        fds, evs = self._fds, self._evs
        for i in range(n):
            event = evs[i]
            events = (_W if event & ~_EPOLLIN else 0) | (_R if event & ~_EPOLLOUT else 0)
            key = keys.get(fds[i])
            if key:
                ready.append((key, events & key.events))
        return ready


_EPOLLIN, _EPOLLOUT = 0x001, 0x004
_W, _R = selectors.EVENT_WRITE, selectors.EVENT_READ


class ClientLoop(asyncio.SelectorEventLoop):
    """A ClientInstance's loop: the standard selector loop over a HandoffSelector (``handoff``),
    with a leaner turn (``_run_once``)."""

    def __init__(self):
        self.handoff = HandoffSelector()
        super().__init__(self.handoff)

    def _run_once(self):
        """asyncio's turn (``BaseEventLoop._run_once``: the same steps in the same order, on its
        own fields), without what it pays per turn and a caught-up TCP consumer pays per message:
        ``min(max(...))`` for the timeout (a builtin's argument parsing is ~800 instructions
        each), ``time()`` as a Python method, ``_process_events`` and ``_add_callback`` as calls,
        ``range`` over the ready handles (bench/RESULTS.md, "Session 10, tcpread"). The rare
        cases (debug mode; many cancelled timers to drop) run asyncio's own turn instead."""
        scheduled = self._scheduled
        n = len(scheduled)
        if self._debug or (n > _MIN_SCHEDULED and self._timer_cancelled_count / n > _MIN_CANCELLED_FRACTION):
            return super()._run_once()
        while scheduled and scheduled[0]._cancelled:  # cancelled timers off the head of the heap
            self._timer_cancelled_count -= 1
            heappop(scheduled)._scheduled = False
        ready = self._ready
        if ready or self._stopping:
            timeout = 0
        elif scheduled:
            timeout = scheduled[0]._when - _monotonic()  # BaseEventLoop.time()
            if timeout < 0:
                timeout = 0
            elif timeout > _MAX_SELECT_S:
                timeout = _MAX_SELECT_S
        else:
            timeout = None
        # the selector's C wait (HandoffSelector.select's, owed wake-ups or not), then
        # _process_events inline over what it returned
        sel = self.handoff
        sel.owed = False
        spread = sel._spread[0]
        if spread:
            sel.look(spread)
        if timeout is None:
            ms = -1
        elif timeout <= 0:
            ms = 0
        else:  # (HandoffSelector.select's rounding)
            ms = int(timeout * 1e3)
            if ms < timeout * 1e3:
                ms += 1
        keys = sel._fd_to_key
        fds, evs = sel._fds, sel._evs
        n = sel._wait(sel._epfd, sel._slots, len(sel._keep), ms, fds, evs, len(keys), sel._spread)
        if n < 0:
            if n != -errno.EINTR:
                raise OSError(-n, os.strerror(-n))
            n = 0
        for i in range(n) if n != 1 else _ONE:
            key = keys.get(fds[i])
            if not key:
                continue
            event = evs[i]
            reader, writer = key.data
            if event & ~_EPOLLOUT and key.events & _R and reader is not None:
                if reader._cancelled:
                    self._remove_reader(key.fileobj)
                else:
                    ready.append(reader)
            if event & ~_EPOLLIN and key.events & _W and writer is not None:
                if writer._cancelled:
                    self._remove_writer(key.fileobj)
                else:
                    ready.append(writer)
        if scheduled:  # the timers that are due
            end = _monotonic() + self._clock_resolution
            while scheduled and scheduled[0]._when < end:
                handle = heappop(scheduled)
                handle._scheduled = False
                ready.append(handle)
        # the handles ready now, not those they add (asyncio's rule: those run after the next poll)
        ntodo = len(ready)
        while ntodo:
            ntodo -= 1
            handle = ready.popleft()
            if not handle._cancelled:
                handle._run()
        handle = None  # (asyncio's: no cycle through a raised exception's frame)


    def _read_from_self(self):
        """The self-pipe's bytes (another thread's ``call_soon_threadsafe``: a producer's send
        handed to this loop wakes it so), read with one ``recv``: asyncio's reads until the
        socket is empty, a second system call per wake-up that always fails with EAGAIN. The
        selector is level-triggered, so what one read leaves wakes the next turn."""
        try:
            data = self._ssock.recv(4096)
        except (BlockingIOError, InterruptedError):
            return
        if data:
            self._process_self_data(data)


_ONE = (0,)
# BaseEventLoop._run_once's constants (asyncio.base_events)
_MIN_SCHEDULED = getattr(base_events, "_MIN_SCHEDULED_TIMER_HANDLES", 100)
_MIN_CANCELLED_FRACTION = getattr(base_events, "_MIN_CANCELLED_TIMER_HANDLES_FRACTION", 0.5)
_MAX_SELECT_S = getattr(base_events, "MAXIMUM_SELECT_TIMEOUT", 24 * 3600)
if sys.version_info[:2] != (3, 11):
    # the turn above mirrors CPython 3.11's BaseEventLoop._run_once on its private fields; another
    # version keeps asyncio's own turn (slower by the ~13k instructions a cycle, never wrong)
    del ClientLoop._run_once


class ConsumePool:
    """The consume threads (RocketMQ's consumeThreadMin, all started at once): ``submit(fn,
    *args)`` runs ``fn(*args)`` on one of them, in submission order of taking. A deque and a C
    futex word (``native/handoff.c``): no Future, work item or condition per task, and from the
    loop thread (``loop_thread``, whose selector is ``selector``) no wake-up with the GIL held."""

    def __init__(self, n: int, name: str, selector: HandoffSelector | None = None,
                 loop_thread: threading.Thread | None = None):
        self._tasks: collections.deque = collections.deque()
        self._h = ffi.new("shmq_handoff *")
        # the owed wake-ups' counter, as an int32_t pointer: an item of it is cheaper to bump
        # than the struct's attribute (submit from the loop thread, once per pulled batch)
        self._posts = ffi.addressof(self._h[0], "posts")
        self._stopping = False
        # the queue's head when the spare tasks' look was set, and when (monotonic): the same
        # head at the look is HandoffSelector.respread's sign of threads stuck in a listener
        self.mark: tuple | None = None
        self.marked = 0.0
        self._selector = selector if selector is not None and selector.attach(self._h, self) else None
        self._loop_ident = loop_thread.ident if loop_thread is not None and self._selector is not None else None
        self._threads = [threading.Thread(target=self._run, name=f"{name}_{i}", daemon=True) for i in range(n)]
        for t in self._threads:
            t.start()

    def submit(self, fn, *args) -> None:
        if self._stopping:
            raise RuntimeError("the consume pool is shut down")
        self._tasks.append((fn, args))  # before the post: a thread that misses it sees the new seq
        if threading.get_ident() == self._loop_ident:
            self._posts[0] += 1
            self._selector.owed = True
        else:
            lib.shmq_handoff_post(self._h, 1)

    def steady(self, fn) -> tuple | None:
        """``submit(fn, pq, msgs)`` from the loop thread, for native/pull_steady.c to do in C:
        (this pool, the queue's append, fn, the owed-posts word's address, the selector); None
        when called off the loop thread or with no selector (submit posts at once then)."""
        if self._selector is None or threading.get_ident() != self._loop_ident:
            return None
        return (self, self._tasks.append, fn, int(ffi.cast("intptr_t", self._posts)), self._selector)

    def _run(self) -> None:
        tasks, h, wait = self._tasks, self._h, lib.shmq_handoff_wait
        pop = tasks.popleft
        while not self._stopping:
            if not tasks:  # looked at first: an IndexError per wake-up costs ~2,000 instructions
                seen = h.seq  # read before the queue is looked at again (handoff.c's rule)
                if not tasks and not self._stopping:
                    wait(h, seen, IDLE_WAIT_MS)
                continue
            try:
                fn, args = pop()
            except IndexError:  # another thread took it first
                continue
            try:
                fn(*args)
            except Exception:  # noqa: BLE001 - one task's failure must not stop a consume thread
                log.exception("a consume task failed")

    def shutdown(self) -> None:
        """Drop the tasks not started (their offsets were not committed), wait for the running ones."""
        self._stopping = True
        self._tasks.clear()
        if self._selector is not None:
            self._selector.detach(self._h)
        lib.shmq_handoff_post(self._h, len(self._threads))
        me = threading.current_thread()
        for t in self._threads:
            if t is not me:
                t.join()
