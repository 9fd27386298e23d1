"""cffi build script (API mode, out-of-line): compiled by ``pip install`` through setup.py's
``cffi_modules``; never imported at run time. Produces ``shmq.native._core``.

The cdef is cut from the CDEF-BEGIN/CDEF-END blocks of layout.h and core.h, so every struct
and prototype is written once, in C."""
import pathlib
import re

from cffi import FFI

HERE = pathlib.Path(__file__).resolve().parent


def cdef_block(name: str) -> str:
    text = (HERE / name).read_text()
    block = text.split("/* CDEF-BEGIN */", 1)[1].split("/* CDEF-END */", 1)[0]
    keep = []
    for line in block.splitlines():
        if line.startswith("#") and not re.match(r"#define \w+ -?(0x[0-9A-Fa-f]+|\d+)\s*$", line):
            continue
        keep.append(line)
    return "\n".join(keep)


ffibuilder = FFI()
ffibuilder.cdef(cdef_block("layout.h") + "\n" + cdef_block("core.h") + "\n" + cdef_block("handoff.h"))
ffibuilder.set_source(
    "shmq.native._core",
    '#include "core.h"\n#include "handoff.h"\n',
    # Relative paths: setuptools refuses absolute ones; pip runs this from the project root.
    # core_*.c: the C core, one job a file (core_private.h says which); they share core_private.h
    sources=["shmq/native/core_util.c", "shmq/native/core_ctl.c", "shmq/native/core_append.c",
             "shmq/native/core_batch.c", "shmq/native/core_index.c", "shmq/native/core_wait.c",
             "shmq/native/handoff.c"],
    depends=["shmq/native/core_private.h", "shmq/native/core.h", "shmq/native/layout.h"],
    include_dirs=["shmq/native"],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
