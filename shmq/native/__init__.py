"""The C core, compiled by cffi at install time. ``ffi`` and ``lib`` come from ``shmq.native._core``."""
from shmq.native._core import ffi, lib

__all__ = ["ffi", "lib"]
