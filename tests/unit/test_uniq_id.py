"""UNIQ_KEY ids drawn in C: the Java client's layout, one counter for every thread, a new
month window when the clock leaves the old one, a new prefix in a forked child."""
from __future__ import annotations

import datetime
import os
import threading

from shmq.client.uniq_id import generator, new_uniq_id, new_uniq_ids
from shmq.native import ffi


def test_layout_and_time_part():
    i = new_uniq_id()
    assert len(i) == 32 and i == i.upper() and int(i, 16) >= 0
    g = generator()
    ms = int(i[20:28], 16)
    now = datetime.datetime.now()
    start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    # Java writes (int)(now - monthStart): the low 32 bits, past 2^31 after 24.8 days
    assert abs(ms - int((now - start).total_seconds() * 1000) % 2**32) < 5000
    assert i[:20] == ffi.unpack(g.c.prefix, 20).decode()


def test_unique_across_threads():
    out: list[list[str]] = [[] for _ in range(4)]

    def draw(k):
        for _ in range(2000):
            out[k].append(new_uniq_id())
            out[k].extend(new_uniq_ids(7))
    ts = [threading.Thread(target=draw, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    ids = [i for part in out for i in part]
    assert len(ids) == 4 * 2000 * 8
    # the counter is 16 bits: within one millisecond ids stay unique while fewer than 65536
    # are drawn, so check uniqueness per (time, counter) window the way Java's ids behave
    assert len(set(ids)) == len(ids)


def test_a_stale_month_window_is_rolled_forward():
    g = generator()
    g.c.month_start_ms, g.c.next_month_ms = 0, 1  # as if the month had ended long ago
    i = new_uniq_id()
    assert g.c.next_month_ms > 1 and len(i) == 32
    assert int(i[20:28], 16) < 32 * 86_400_000


def test_a_forked_child_has_its_own_prefix():
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        os.write(w, new_uniq_id().encode())
        os._exit(0)
    os.close(w)
    child = os.read(r, 64).decode()
    os.close(r)
    os.waitpid(pid, 0)
    assert child[:20] != new_uniq_id()[:20]
