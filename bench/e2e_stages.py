"""The local e2e latency split into stages (bench/RESULTS.md, "Session 5, busypoll" for the
busy-polling row, "Session 11, local11" for the futex row): an instrumented copy of the tree, and
the per-stage summary of what its runs record.

    git archive HEAD | tar -x -C <copy> && python bench/e2e_stages.py apply <copy>
    (cd <copy> && python setup.py build_ext --inplace)
    PYTHONPATH=<copy> shmq-bench e2e --transport local --peers futex-limit --shmq shmq   # or --spin-us 2000000
    python bench/e2e_stages.py summary <out>/stages-<pid>.json         # one file per consumer
    python bench/e2e_stages.py summary <out>/stages-ring-<pid>.json    # the limit row's

``apply`` patches the copy, never this tree; the files go to ``$SHMQ_STAGES_DIR`` (default
/tmp/shmq-stages). Stamps (CLOCK_MONOTONIC ns): the C append writes the time into the record's
born timestamp just before it publishes commit_pos ("published"); the consumer's wait notes when
its spin saw commit_pos move or its futex sleep returned ("seen"; 0: its one look with the GIL
found it); wait_read stamps its return, with the GIL back, and the end of the record read; the
pull thread stamps turn()'s hold of wait_read's answer and the entry of the inline delivery
(PushConsumer._consume_inline); the bench's push listener stores them with its clock on entry.
The futex-limit and spin-limit ring rows: the producer's clock in bytes 8-16 of the slot
(unused in duration mode) and the consumer's wake-up. Each stamp is a clock read, 140-430 ns on this VM: the stages
after "seen" carry one each. The patches are exact strings of the tree they were written against
(session 11's local11 branch); ``apply`` stops with the one that no longer matches.
"""
import json
import os
import sys

OUT = os.environ.get("SHMQ_STAGES_DIR", "/tmp/shmq-stages")


def edit(root, p, pairs):
    p = os.path.join(root, p)
    with open(p) as f:
        s = f.read()
    for old, new, cnt in pairs:
        if s.count(old) != cnt:
            raise SystemExit(f"{p}: the tree moved on; no longer matches: {old[:70]!r}")
        s = s.replace(old, new)
    with open(p, "w") as f:
        f.write(s)


PATCHES = [  # (file, [(old, new, occurrences)]): a table
('shmq/native/core_append.c', [
 ("""    if (has_cq) STORE_REL(&qs->next_offset, qoff + 1);
    fault(w, SHMQ_FP_MID_PUBLISH);
    STORE_REL(&c->pos.commit_pos, rec + (int64_t)size);
    c->pos.appends++;""", """    be64(dst + SHMQ_R_BORNTS, (uint64_t)mono_ns()); /* DBG */
    if (has_cq) STORE_REL(&qs->next_offset, qoff + 1);
    fault(w, SHMQ_FP_MID_PUBLISH);
    STORE_REL(&c->pos.commit_pos, rec + (int64_t)size);
    c->pos.appends++;""", 1)]),
('shmq/native/core_wait.c', [
 ("""            if ((cpos = LOAD_ACQ(&c->pos.commit_pos)) > seen) return cpos;
        }""", """            if ((cpos = LOAD_ACQ(&c->pos.commit_pos)) > seen) { shmq_dbg_det = mono_ns(); return cpos; }
        }""", 1),
 ("            futex_wait_bits(&c->pos.data_seq, seq, deadline, bits);",
  "            { futex_wait_bits(&c->pos.data_seq, seq, deadline, bits); shmq_dbg_det = mono_ns(); }", 1),
 ("int64_t shmq_load_i64(", "int64_t shmq_dbg_det;\nint64_t shmq_load_i64(", 1)]),
('shmq/native/core.h', [("/* CDEF-END */", "extern int64_t shmq_dbg_det;\n/* CDEF-END */", 1)]),
('shmq/native/hot_wait.c', [
 ("""                          keep_gil, t0);
    PyObject *read = NULL;""", """                          keep_gil, t0);
    dbg_ret = mono_ns();
    PyObject *read = NULL;""", 1),
 ("""        if (!read) return NULL;
    } else {""", """        if (!read) return NULL;
        dbg_read = mono_ns();
    } else {""", 1),
 ("#define GIL_HOLD_NS", """static int64_t dbg_ret, dbg_read;
static PyObject *hot_dbg(PyObject *self, PyObject *a) { return Py_BuildValue("(LL)", (long long)dbg_ret, (long long)dbg_read); }
#define GIL_HOLD_NS""", 1),
 ("static PyMethodDef wait_methods[] = {", """static PyMethodDef wait_methods[] = {
    {"dbg", (PyCFunction)hot_dbg, METH_NOARGS, ""},""", 1)]),
('shmq/client/local_pull.py', [
 ("""                            self.poke_at, self.poked, self.spin, timeout, qs.states, self.batch, self.keep, look)
""", """                            self.poke_at, self.poked, self.spin, timeout, qs.states, self.batch, self.keep, look)
        DBG[0] = _mns()
""", 1),
 ("LOOK_AGAIN_S = 0.05", "DBG = [0, 0]\n_mns = time.monotonic_ns\nLOOK_AGAIN_S = 0.05", 1)]),
('shmq/client/push_consumer.py', [
 ("""        n, first, last = len(msgs), msgs[0].queue_offset, msgs[-1].queue_offset
        if n > self.consume_batch_size""", """        _lp.DBG[1] = time.monotonic_ns()
        n, first, last = len(msgs), msgs[0].queue_offset, msgs[-1].queue_offset
        if n > self.consume_batch_size""", 1),
 ("from .handoff import ConsumePool", "from .handoff import ConsumePool\nfrom . import local_pull as _lp", 1)]),
('shmq/bench/peers/shmq_client.py', [
 ("""            self._handle([m.body for m in msgs], now)
            return success""", """            d = dbg()
            det = lib.shmq_dbg_det
            lib.shmq_dbg_det = 0
            for m in msgs:
                rec.append((unpack(m.body)[0], m.born_timestamp, det, d[0], d[1], now, len(msgs), lp.DBG[0],
                            lp.DBG[1]))
            self._handle([m.body for m in msgs], now)
            return success""", 1),
 ("""        clock = time.monotonic_ns
""", """        clock = time.monotonic_ns
        from shmq.native import _hot
        from shmq.native._core import lib
        from shmq.client import local_pull as lp
        import struct
        dbg = _hot.dbg
        unpack = struct.Struct("<q").unpack_from
        rec = self._rec = []
""", 1),
 ("""    def close(self) -> None:
        if self._handle is None:
""", """    def close(self) -> None:
        import json
        with open(os.path.join(%r, f"stages-{os.getpid()}.json"), "w") as f:
            json.dump(self._rec, f)
        if self._handle is None:
""" % OUT, 1)]),
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
                    rows.append((st, pub, det, det, det, now, len(bodies), det, det))
                handle(bodies)
                maybe_fold()
        with open(os.path.join(%r, f"stages-ring-{os.getpid()}.json"), "w") as f:
            json.dump(rows, f)""" % OUT, 1)]),
]


def apply(root):
    for path, pairs in PATCHES:
        edit(root, path, pairs)
    os.makedirs(OUT, exist_ok=True)


# a row: (intended, published, seen, wait_read back, read done, listener clock, messages in the
# call, turn has the answer, inline delivery entered); the ring rows repeat "seen" in 3, 4, 7, 8
STAGES = (("intended -> published", 0, 1), ("published -> seen", 1, 2), ("seen -> wait_read back (GIL)", 2, 3),
          ("-> read done", 3, 4), ("-> turn has (i, read)", 4, 7), ("-> _consume_inline entered", 7, 8),
          ("-> listener clock", 8, 5), ("total", 0, 5))


def summary(path):
    rows = json.load(open(path))
    rows = rows[len(rows) // 5:]  # the warm-up
    one = [r for r in rows if r[6] == 1]
    for label, sel in (("seen by a futex sleep's return or the spin", [r for r in one if r[2] > 0]),
                       ("found by the wait's first look (no sleep, no spin)", [r for r in one if r[2] == 0])):
        print(f"{path}: {len(rows)} rows, {len(one)} one-message calls; {len(sel)} {label}")
        if not sel or (not sel[0][2] and "ring" in path):
            continue
        for name, a, b in STAGES:
            if not sel[0][2] and a == 1:
                continue
            c = sorted(r[b] - (r[a] if r[a] else r[1]) for r in sel)
            q = lambda p: c[int(p * (len(c) - 1))] / 1e3  # noqa: E731
            print(f"  {name:32s} p10 {q(.1):8.1f}  p50 {q(.5):8.1f}  p90 {q(.9):8.1f} us")
    tot = sorted(r[5] - r[0] for r in rows)
    print(f"  every row, total: p50 {tot[len(tot) // 2] / 1e3:.1f} us, p99 {tot[int(.99 * (len(tot) - 1))] / 1e3:.1f} us")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("apply", "summary"):
        raise SystemExit(__doc__)
    (apply if sys.argv[1] == "apply" else summary)(sys.argv[2])
