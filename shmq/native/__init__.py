"""The C core, compiled by cffi at install time. ``ffi`` and ``lib`` come from ``shmq.native._core``;
``hot_send`` is ``shmq_send`` called with the GIL held (``shmq.native._hot``, see hot.c)."""
from shmq.native import _hot
from shmq.native._core import ffi, lib

_hot.bind(int(ffi.cast("uintptr_t", ffi.addressof(lib, "shmq_send"))))
hot_send = _hot.send

__all__ = ["ffi", "lib", "hot_send"]
