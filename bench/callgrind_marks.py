"""The callgrind client requests the *_instr.py scripts' children call around their window (a
tiny C library loaded with ctypes: ``cg_start()`` zeroes and starts instrumentation,
``cg_stop(label)`` stops it and dumps the counts under ``label``; run under
``valgrind --tool=callgrind --instr-atstart=no``).

    build(tmp) -> path of the compiled library in the directory tmp"""
from __future__ import annotations

import subprocess
from pathlib import Path

CG_C = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(const char *label) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS_AT(label); }
"""


def build(tmp: Path) -> str:
    (tmp / "cg.c").write_text(CG_C)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", str(tmp / "cg.so"), str(tmp / "cg.c")], check=True)
    return str(tmp / "cg.so")
