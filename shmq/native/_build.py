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
    sources=["shmq/native/core.c", "shmq/native/handoff.c"],
    include_dirs=["shmq/native"],
    extra_compile_args=["-O2", "-std=gnu11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
)

if __name__ == "__main__":
    ffibuilder.compile(verbose=True)
