"""AsyncSend's own dealloc (native/hot_oneway.c as_dealloc, installed by ``_oneway.bind_async``):
what a send held is released when the caller drops it, in a subclass too, through the cyclic
GC too, and a finalizer still runs."""
from __future__ import annotations

import gc
import sys
import types
import weakref

from shmq.client import async_lane  # noqa: F401 - binds AsyncSend (its dealloc among it)
from shmq.client.remote_send import AsyncSend


class Held:
    """Something a send holds (weakly referenceable, to see it go); callable, as a callback is."""

    def __call__(self, value) -> None:
        pass


def _send(**kw):
    held = {k: Held() for k in ("producer_extra", "callback", "mq", "req", "uniq", "timeout")}
    producer = types.SimpleNamespace(retry_times_async=2, extra=held["producer_extra"])
    s = AsyncSend(producer, kw.get("callback", held["callback"]), held["mq"], held["req"], held["uniq"],
                  held["timeout"])
    return s, [weakref.ref(v) for v in held.values()] + [weakref.ref(producer.extra)]


def test_a_dropped_send_releases_all_it_held_and_its_class():
    refs_before = sys.getrefcount(AsyncSend)
    for _ in range(2000):
        s, refs = _send()
        s._resolve("r")  # (SendFuture.set_result: the callback called, the value kept)
        assert s.result() == "r"
        del s
        assert all(r() is None for r in refs)
    assert sys.getrefcount(AsyncSend) == refs_before


def test_a_failed_and_a_pending_send_release_their_values():
    s, refs = _send()
    class Failure(Exception):
        pass

    err = Failure("x")
    s._fail(err)
    werr = weakref.ref(err)
    del s, err
    assert werr() is None and all(r() is None for r in refs)
    s, refs = _send()  # never completed
    del s
    assert all(r() is None for r in refs)


def test_a_send_in_a_cycle_is_collected():
    s, refs = _send()
    marker = Held()
    s.req = [s, marker]  # the send holds itself
    wm = weakref.ref(marker)
    del s, marker
    gc.collect()
    assert wm() is None and all(r() is None for r in refs)


def test_a_subclass_keeps_its_own_slots_and_finalizer():
    gone = []

    class Traced(AsyncSend):
        __slots__ = ("extra",)

        def __del__(self):
            gone.append(self.uniq)

    refs_before = sys.getrefcount(Traced)
    held = Held()
    producer = types.SimpleNamespace(retry_times_async=0)
    t = Traced(producer, None, Held(), Held(), "u1", 3.0)
    t.extra = held
    wh = weakref.ref(held)
    del held, t
    assert gone == ["u1"] and wh() is None
    assert sys.getrefcount(Traced) == refs_before
