"""The local e2e latency split into stages (bench/RESULTS.md, "Session 5, busypoll"): an
instrumented copy of the tree, and the per-stage summary of what its runs record.

    git archive HEAD | tar -x -C /tmp/stages && python bench/e2e_stages.py apply /tmp/stages
    (cd /tmp/stages && python setup.py build_ext --inplace)
    PYTHONPATH=/tmp/stages shmq-bench e2e --transport local --peers spin-limit --shmq shmq --spin-us 2000000
    python bench/e2e_stages.py summary /tmp/bp5/stages-<pid>.json    # one file per consumer

``apply`` patches the copy, never this tree: the C append writes CLOCK_MONOTONIC ns (its CPU in the
top byte) into the record's born timestamp just before it publishes commit_pos; the consumer's C
spin notes when it saw commit_pos move; wait_read stamps its return and the record read's end;
the bench's push listener stores them with its clock on entry (and its CPU). The spin-limit ring
row likewise (its producer's clock in bytes 8-16 of the slot, unused in duration mode). Files go
to /tmp/bp5/stages-*.json. The patches are exact strings of the tree they were written against
(main at 1db597c); ``apply`` stops with the one that no longer matches.
"""
import json
import os
import sys


def edit(root, p, pairs):
    p = os.path.join(root, p)
    with open(p) as f:
        s = f.read()
    for old, new, cnt in pairs:
        if s.count(old) != cnt:
            raise SystemExit(f"{p}: the tree moved on; no longer matches: {old[:70]!r}")
        s = s.replace(old, new)
    if p.endswith("core.c") and "#define _GNU_SOURCE" not in s[:2000]:
        s = "#define _GNU_SOURCE\n" + s  # sched_getcpu
    with open(p, "w") as f:
        f.write(s)


PATCHES = [  # (file, [(old, new, occurrences)]): a table
('shmq/native/core.c', [
 ("""    if (has_cq) STORE_REL(&qs->next_offset, qoff + 1);
    fault(w, SHMQ_FP_MID_PUBLISH);
    STORE_REL(&c->pos.commit_pos, rec + (int64_t)size);""", """    be64(dst + SHMQ_R_BORNTS, (uint64_t)mono_ns() | ((uint64_t)sched_getcpu() << 56)); /* DBG */
    if (has_cq) STORE_REL(&qs->next_offset, qoff + 1);
    fault(w, SHMQ_FP_MID_PUBLISH);
    STORE_REL(&c->pos.commit_pos, rec + (int64_t)size);""", 1),
 ("""            if ((cpos = LOAD_ACQ(&c->pos.commit_pos)) > seen) return cpos;
        }""", """            if ((cpos = LOAD_ACQ(&c->pos.commit_pos)) > seen) { shmq_dbg_det = mono_ns(); return cpos; }
        }""", 1),
 ("static int64_t mono_ns(void) {", "int64_t shmq_dbg_det;\nstatic int64_t mono_ns(void) {", 1)]),
('shmq/native/core.h', [("/* CDEF-END */", "extern int64_t shmq_dbg_det;\n/* CDEF-END */", 1)]),
('shmq/native/hot.c', [
 ("""spin, timeout,
                        keep_gil);
    PyObject *read = NULL;""", """spin, timeout,
                        keep_gil);
    dbg_ret = dbg_gil = mono_ns();
    PyObject *read = NULL;""", 1),
 ("""        if (!read) return NULL;
    } else {""", """        if (!read) return NULL;
        dbg_read = mono_ns();
    } else {""", 1),
 ("#define GIL_HOLD_NS", """static int64_t dbg_ret, dbg_gil, dbg_read;
static PyObject *hot_dbg(PyObject *self, PyObject *a) { return Py_BuildValue("(LLL)", (long long)dbg_ret, (long long)dbg_gil, (long long)dbg_read); }
#define GIL_HOLD_NS""", 1),
 ("static PyMethodDef methods[] = {", """static PyMethodDef methods[] = {
    {"dbg", (PyCFunction)hot_dbg, METH_NOARGS, ""},""", 1)]),
('shmq/bench/peers/shmq_client.py', [
 ("""            self._handle([m.body for m in msgs], now)
            return success""", """            d = dbg()
            det = lib.shmq_dbg_det
            for m in msgs:
                rec.append((unpack(m.body)[0], m.born_timestamp & ((1 << 56) - 1), det, d[0], d[1], d[2], now, len(msgs), m.born_timestamp >> 56, getcpu()))
            self._handle([m.body for m in msgs], now)
            return success""", 1),
 ("""        clock = time.monotonic_ns
""", """        clock = time.monotonic_ns
        from shmq.native import _hot
        from shmq.native._core import lib
        import struct
        dbg = _hot.dbg
        unpack = struct.Struct("<q").unpack_from
        rec = self._rec = []
        import ctypes
        getcpu = ctypes.CDLL(None).sched_getcpu
""", 1),
 ("""    def close(self) -> None:
""", """    def close(self) -> None:
        import json
        with open(f"/tmp/bp5/stages-{os.getpid()}.json", "w") as f:
            json.dump(self._rec, f)
""", 1)]),
('shmq/bench/peers/limits.py', [
 ("""            mm[at:at + size] = body
            s += 1
            state[0] = s
            seq[0] = s & 0xFFFFFFFF""", """            mm[at:at + size] = body
            s += 1
            state[0] = s
            mm[at + 8:at + 16] = _Q.pack(time.monotonic_ns())
            seq[0] = s & 0xFFFFFFFF""", 1),
 ("""            if s == seen & 0xFFFFFFFF:
                wait(seq, s, timeout)
                s = seq[0]""", """            det = 0
            if s == seen & 0xFFFFFFFF:
                wait(seq, s, timeout)
                det = time.monotonic_ns()
                s = seq[0]
            DBG[0] = det""", 1),
 ("RING = 8192", "import struct\n_Q = struct.Struct('<q')\nDBG = [0]\nRING = 8192", 1),
]),
('shmq/bench/loops.py', [
 ("""        while not stop():
            bodies = recv(0.05)
            if bodies:
                handle(bodies)
                maybe_fold()""", """        import os, json
        from .peers import limits
        rows = []
        while not stop():
            bodies = recv(0.05)
            if bodies:
                now = self.clock()
                det = limits.DBG[0]
                for b in bodies:
                    st, pub = struct.unpack_from("<qq", b)
                    rows.append((st, pub, det, det, det, det, now, len(bodies), -1, -2))
                handle(bodies)
                maybe_fold()
        with open(f"/tmp/bp5/stages-ring-{os.getpid()}.json", "w") as f:
            json.dump(rows, f)""", 1)]),
]


def apply(root):
    for path, pairs in PATCHES:
        edit(root, path, pairs)
    os.makedirs("/tmp/bp5", exist_ok=True)


STAGES = ("intended -> published", "published -> seen", "seen -> wait returned", "-> GIL back",
          "-> read done", "-> listener clock", "total")


def summary(path):
    rows = json.load(open(path))
    rows = rows[len(rows) // 5:]  # the warm-up
    good = [r for r in rows if r[7] == 1 and r[0] <= r[1] <= r[2] <= r[3] <= r[4] <= r[5] <= r[6]]
    print(f"{len(rows)} rows, {len(good)} one-message wake-ups seen by the spin")
    cols = [[r[k + 1] - r[k] for r in good] for k in range(6)] + [[r[6] - r[0] for r in good]]
    for name, c in zip(STAGES, cols):
        c.sort()
        if c:
            q = lambda p: c[int(p * (len(c) - 1))]  # noqa: E731
            print(f"{name:24s} p10 {q(.1):8d}  p50 {q(.5):8d}  p90 {q(.9):8d} ns")
    for same in (True, False):
        sel = sorted(r[2] - r[1] for r in good if len(r) > 9 and r[8] >= 0 and (r[8] == r[9]) == same)
        if sel:
            print(f"{'same CPU' if same else 'apart'}: {len(sel)} wake-ups, published -> seen p50 {sel[len(sel) // 2]} ns")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("apply", "summary"):
        raise SystemExit(__doc__)
    (apply if sys.argv[1] == "apply" else summary)(sys.argv[2])
