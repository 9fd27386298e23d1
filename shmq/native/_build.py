"""cffi build script (API mode, out-of-line): compiled by ``pip install`` through setup.py's
``cffi_modules``; never imported at run time. Produces ``shmq.native._core``."""
import pathlib

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent

ffibuilder = FFI()
ffibuilder.cdef((HERE / "core.cdef").read_text())
ffibuilder.set_source(
    "shmq.native._core",
    '#include "core.h"\n',
    # Relative paths: setuptools refuses absolute ones; pip runs this from the project root.
    sources=["shmq/native/core.c"],
    include_dirs=["shmq/native"],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wno-unused-function"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
