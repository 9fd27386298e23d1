"""The paced TCP e2e latency (``shmq-bench e2e --transport tcp``) split into hops, per message
(bench/RESULTS.md, "Session 8, tcpe2e"):

    .venv/bin/python bench/tcp_e2e_stages.py hook <scratch>/hook       # writes <scratch>/hook/sitecustomize.py
    mkdir <scratch>/t && SHMQ_TRACE_DIR=<scratch>/t PYTHONPATH=<scratch>/hook \\
        .venv/bin/shmq-bench e2e --transport tcp --peers none --shmq shmq --send-mode async|oneway|sync
    .venv/bin/python bench/tcp_e2e_stages.py summary <scratch>/t [--skip 5000] [--first 12]

The hook (a ``sitecustomize`` every process of the run loads: the harness's children, the
broker's supervisor and workers) wraps, at import, the few Python functions each hop passes
through and appends ``kind t_ns extra seq,seq,...`` lines to ``<dir>/<pid>.trace``
(CLOCK_MONOTONIC, one clock for every process). A message is known by the bench body it
travels in (``scenarios.HEADER``: stamp, producer, seq, then the 'x' padding), found in the
bytes each ``Connection`` reads (``data_received``) and writes (``_flush``):

* ``S``: the harness calls the send (its return time in ``extra``); ``L``: the consumer's
  listener was entered (the harness's own clock, the latency's end);
* ``w`` in the producer: its frame handed to the socket (async / oneway: the client loop
  thread's write; a sync send writes in C, and so does an async / oneway caller's thread when
  the connection is idle (client/direct_write.py): for those the hop starts at ``S``);
* ``r`` / ``w`` in a worker: the send frame read, then the pull answer carrying it written;
* ``r`` in the consumer: the answer read (the C reader's reads, protocol/read_native.py, by a
  ``MSG_PEEK`` of the socket just before each: one more ``recv`` a read); ``u``:
  ``TcpPull._pulled`` (the C read of the answer done; a steady answer, native/pull_steady.c,
  never reaches it); ``q``: ``Connection.start_frame`` (the steady answer's next PULL queued);
  ``o``: the loop's select, or ``ClientLoop``'s turn, that pays the hand-over's wake-ups;
  ``c``: the consume task starts;
* ``D``: the producer's loop thread starts a drain; ``e``: a client loop's select returned;
  ``h`` / ``x`` / ``k``: a worker parks a pull (queue:offset:holds), checks its holds, is
  woken by its pull-wake thread.

The hook costs a few microseconds per read and write (a ``bytes.find`` and a list append; the
lines are written 400 at a time); the untraced rows are the figures, this splits them.
``summary`` skips the warm-up (the first ``--skip`` messages, 0.5 s at 10,000/s) and prints
each hop's percentiles, the producer's and consumer's inner hops and, with ``--first``, the
first messages' timelines (the start-up).
"""
from __future__ import annotations

import argparse
import bisect
import glob
import os
import sys

HOOK = r'''"""bench/tcp_e2e_stages.py's hook: SHMQ_TRACE_DIR=<dir> turns it on."""
import os

_dir = os.environ.get("SHMQ_TRACE_DIR")
if _dir:
    import atexit
    import struct
    import sys
    import time

    _unp = struct.Struct("<qII").unpack
    _clock = time.monotonic_ns
    _buf = []
    _fd = os.open(os.path.join(_dir, f"{os.getpid()}.trace"), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.write(_fd, f"H {' '.join(sys.argv)[:200]}\n".encode())
    _XS = b"x" * 84

    def _seqs(data):
        out = []
        pos = data.find(_XS, 16)
        while pos >= 0:
            out.append(_unp(data[pos - 16:pos])[2])
            pos = data.find(_XS, pos + 84)
        return out

    def _out():
        if _buf:
            os.write(_fd, "".join(_buf).encode())
            _buf.clear()

    def _emit(kind, t, seqs, extra=""):
        _buf.append(f"{kind} {t} {extra} {','.join(map(str, seqs))}\n")
        if len(_buf) >= 400:
            _out()

    atexit.register(_out)

    def _wrap(mod, cls, name, make):
        try:
            m = __import__(mod, fromlist=[cls])
            c = getattr(m, cls)
            setattr(c, name, make(getattr(c, name)))
        except Exception as e:  # noqa: BLE001 - a tree without it: no such events
            _emit("E", _clock(), [], f"{mod}.{cls}.{name}:{type(e).__name__}")

    def _read(f):
        def data_received(self, data):
            t = _clock()
            if len(data) >= 100:
                s = _seqs(data)
                if s:
                    _emit("r", t, s)
            return f(self, data)
        return data_received

    def _write(f):
        def _flush(self):
            if self._out:
                t = _clock()
                s = [q for x in self._out for q in _seqs(bytes(x))]
                if s:
                    _emit("w", t, s)
            return f(self)
        return _flush

    def _handle(f):
        def handle(self, bodies, now=None):
            _emit("L", now if now is not None else _clock(),
                  ["%d/%d" % (_unp(b[:16])[2], _unp(b[:16])[0]) for b in bodies])
            return f(self, bodies, now)
        return handle

    def _msgs(kind, f):
        def g(self, *a):
            _emit(kind, _clock(), [_unp(m.body[:16])[2] for m in a[-1]])
            return f(self, *a)
        return g

    def _select(f):
        def select(self, timeout=None):
            if self.owed:
                _emit("o", _clock(), [])
            r = f(self, timeout)
            _emit("e", _clock(), [])
            return r
        return select

    def _mark(kind, extra=None):
        def make(f):
            def g(self, *a, **k):
                _emit(kind, _clock(), [], extra(self, *a) if extra else "")
                return f(self, *a, **k)
            return g
        return make

    _wrap("shmq.protocol.transport", "Connection", "data_received", _read)
    try:
        # the C reader (protocol/read_native.py, native/client_read.c) reads the socket without
        # data_received: its read is traced by a peek at the socket just before it (one more
        # recv a read, MSG_PEEK: the bytes stay for the C reader), so ``r`` stays the answer read
        import socket as _socket
        from shmq.protocol import read_native as _rn

        def _use_reader(hook, factory, _orig=_rn.use_reader):
            def traced(conn, t, fd, size):
                reader, sock = factory(conn, t, fd, size), t._sock

                def read():
                    t0 = _clock()
                    try:
                        data = sock.recv(size, _socket.MSG_PEEK)
                    except OSError:
                        data = b""
                    if len(data) >= 100:
                        s = _seqs(data)
                        if s:
                            _emit("r", t0, s)
                    return reader()
                return read
            return _orig(hook, traced)
        _rn.use_reader = _use_reader
    except Exception as e:  # noqa: BLE001 - a tree without the C reader
        _emit("E", _clock(), [], f"read_native:{type(e).__name__}")
    _wrap("shmq.protocol.transport", "Connection", "_flush", _write)
    _wrap("shmq.bench.loops", "Consumer", "handle", _handle)
    try:
        from shmq.bench import loops as _loops

        def _send_when_due(bodies, due, send, send_batch, clock, sleep):
            started = _loops.wait_until(due, clock, sleep)
            t1 = _clock()
            if len(bodies) == 1 or send_batch is None:
                for body in bodies:
                    send(body)
            else:
                send_batch(bodies)
            _emit("S", t1, [_unp(b[:16])[2] for b in bodies], str(_clock()))
            return started
        _loops._send_when_due = _send_when_due
    except Exception as e:  # noqa: BLE001
        _emit("E", _clock(), [], type(e).__name__)
    _wrap("shmq.client.tcp_pull", "TcpPull", "_pulled", lambda f: _msgs("u", f))
    _wrap("shmq.client.push_consumer", "PushConsumer", "_consume_pulled", lambda f: _msgs("c", f))
    _wrap("shmq.client.handoff", "HandoffSelector", "select", _select)

    def _turn(f):
        def _run_once(self):
            if self.handoff.owed:  # this turn's C wait pays a hand-over's wake-up
                _emit("o", _clock(), [])
            return f(self)
        return _run_once
    _wrap("shmq.client.handoff", "ClientLoop", "_run_once", _turn)
    # the steady pull answer (native/pull_steady.c) queues the next PULL through start_frame
    _wrap("shmq.protocol.transport", "Connection", "start_frame", _mark("q"))
    try:  # a client connection's own, the C one (native/conn_queue.c), set when the client layer loads
        import shmq.client.remote_send  # noqa: F401
        from shmq.protocol.transport import ClientConnection as _cc
        if "start_frame" in vars(_cc):  # (wrapped, pull_steady.c calls the wrapper as a Python method)
            _wrap("shmq.protocol.transport", "ClientConnection", "start_frame", _mark("q"))
    except Exception as e:  # noqa: BLE001 - a tree before it
        _emit("E", _clock(), [], f"ClientConnection.start_frame:{type(e).__name__}")
    _wrap("shmq.client.instance", "ClientInstance", "_drain_submitted", _mark("D"))
    _wrap("shmq.broker.worker.pull_hold", "PullHolds", "hold",
          _mark("h", lambda self, topic, qid, offset, *a: f"{qid}:{offset}:{len(self._holds)}"))
    _wrap("shmq.broker.worker.pull_hold", "PullHolds", "check", _mark("x", lambda self: str(len(self._holds))))
    _wrap("shmq.broker.worker.pull_hold", "PullHolds", "_woken", _mark("k"))
'''

KINDS = "rwLSucoeDhxkq"


def load(d: str) -> list[dict]:
    """Per process: its command line, first time per seq of each kind, the seq-less times."""
    procs = []
    for f in sorted(glob.glob(os.path.join(d, "*.trace"))):
        p = {"cmd": "", "seq": {k: {} for k in KINDS}, "ret": {}, "stamp": {}, "times": {k: [] for k in KINDS}}
        for line in open(f):
            parts = line.rstrip("\n").split(" ")
            k = parts[0]
            if k == "H":
                p["cmd"] = line[2:].strip()
                continue
            if k not in KINDS:
                continue
            t = int(parts[1])
            seqs = parts[3].split(",") if len(parts) > 3 and parts[3] else []
            if not seqs:
                p["times"][k].append(t)
                continue
            for s in seqs:
                if k == "L":
                    s, st = s.split("/")
                    p["stamp"].setdefault(int(s), int(st))
                s = int(s)
                p["seq"][k].setdefault(s, t)
                if k == "S":
                    p["ret"].setdefault(s, int(parts[2]))
        procs.append(p)
    return procs


def pct_row(name: str, xs: list[int]) -> str:
    if not xs:
        return f"| {name} | - | - | - | - |"
    xs = sorted(xs)
    q = lambda f: xs[int(f * (len(xs) - 1))] / 1000  # noqa: E731
    return f"| {name} | {q(.1):,.1f} | {q(.5):,.1f} | {q(.9):,.1f} | {q(.99):,.1f} |"


def summary(d: str, skip: int, first: int) -> None:
    procs = load(d)
    cons = [p for p in procs if p["seq"]["L"]]
    prods = [p for p in procs if p["seq"]["S"]]
    if len(cons) != 1 or len(prods) != 1:
        sys.exit(f"{d}: want one producer and one consumer trace, found {len(prods)} and {len(cons)}")
    c, p = cons[0], prods[0]
    workers = [q for q in procs if q is not c and q is not p and (q["seq"]["r"] or q["seq"]["w"])]
    wr, ww = {}, {}
    for w in workers:
        for s, t in w["seq"]["r"].items():
            wr.setdefault(s, t)
        for s, t in w["seq"]["w"].items():
            ww.setdefault(s, t)
    same = any(w["seq"]["r"] and w["seq"]["w"] for w in workers)
    sent = p["seq"]["S"]
    # a frame with no write of the loop thread traced was written inside the send call: a sync
    # send's (C), or an async / oneway one its caller's thread wrote (client/direct_write.py)
    pw = {**sent, **p["seq"]["w"]}
    stamps = c["stamp"]
    seqs = sorted(stamps)
    print(f"{d}: {len(seqs):,} messages delivered, producer and consumer on {'one worker' if same else 'two workers'};"
          f" {len(seqs) - skip:,} after the first {skip:,}; written by the send call itself (no loop-thread write):"
          f" {sum(1 for s in seqs[skip:] if s not in p['seq']['w']):,}")
    hops = [("intended time -> send call", lambda s: sent[s] - stamps[s]),
            ("send call -> its frame written (producer)", lambda s: pw[s] - sent[s]),
            ("written -> read by the worker", lambda s: wr[s] - pw[s]),
            ("read -> pull answer written (worker)", lambda s: ww[s] - wr[s]),
            ("answer written -> read by the consumer", lambda s: c["seq"]["r"][s] - ww[s]),
            ("answer read -> listener (consumer)", lambda s: c["seq"]["L"][s] - c["seq"]["r"][s]),
            ("total (the row's latency)", lambda s: c["seq"]["L"][s] - stamps[s])]
    print("\n| hop | p10 µs | p50 | p90 | p99 |\n|---|---:|---:|---:|---:|")
    for name, f in hops:
        xs = []
        for s in seqs[skip:]:
            try:
                xs.append(f(s))
            except KeyError:
                pass
        print(pct_row(name, xs))
    # inner hops: the producer's loop thread and the consumer's hand-over
    e, dr = p["times"]["e"], p["times"]["D"]
    inner = {"producer: send call": [], "producer: call returned -> its loop's select returned": [],
             "producer: select returned -> drain": [], "producer: drain -> frame written": [],
             "consumer: answer read -> TcpPull._pulled": [], "consumer: _pulled -> the select paying the wake-up": [],
             "consumer: that select -> consume task": [],
             "consumer (C steady): answer read -> next PULL queued": [],
             "consumer (C steady): PULL queued -> the turn paying the wake-up": [],
             "consumer (C steady): that turn -> consume task": [], "consumer: consume task -> listener": []}
    for s in seqs[skip:]:
        if s in p["seq"]["w"] and s in p["ret"]:
            a = p["ret"][s]
            i, j = bisect.bisect_left(e, a), bisect.bisect_left(dr, a)
            inner["producer: send call"].append(a - sent[s])
            if i < len(e) and j < len(dr) and e[i] <= dr[j] <= pw[s]:
                inner["producer: call returned -> its loop's select returned"].append(e[i] - a)
                inner["producer: select returned -> drain"].append(dr[j] - e[i])
                inner["producer: drain -> frame written"].append(pw[s] - dr[j])
        cs = c["seq"]
        if all(s in cs[k] for k in "rcL") and s not in cs["u"]:  # the steady answer (pull_steady.c)
            q, o = c["times"]["q"], c["times"]["o"]
            i = bisect.bisect_left(q, cs["r"][s])
            if i < len(q) and q[i] <= cs["c"][s]:
                j = bisect.bisect_left(o, q[i])
                inner["consumer (C steady): answer read -> next PULL queued"].append(q[i] - cs["r"][s])
                if j < len(o) and o[j] <= cs["c"][s]:
                    inner["consumer (C steady): PULL queued -> the turn paying the wake-up"].append(o[j] - q[i])
                    inner["consumer (C steady): that turn -> consume task"].append(cs["c"][s] - o[j])
            inner["consumer: consume task -> listener"].append(cs["L"][s] - cs["c"][s])
        if all(s in cs[k] for k in "rucL"):
            o = c["times"]["o"]
            i = bisect.bisect_left(o, cs["u"][s])
            inner["consumer: answer read -> TcpPull._pulled"].append(cs["u"][s] - cs["r"][s])
            inner["consumer: consume task -> listener"].append(cs["L"][s] - cs["c"][s])
            if i < len(o) and o[i] <= cs["c"][s]:
                inner["consumer: _pulled -> the select paying the wake-up"].append(o[i] - cs["u"][s])
                inner["consumer: that select -> consume task"].append(cs["c"][s] - o[i])
    print()
    for name, xs in inner.items():
        if xs:
            print(pct_row(name, xs))
    if first:
        t0 = stamps[seqs[0]]
        print(f"\nthe first {first} messages, µs after each one's intended time (due: ms after the first's)")
        for s in seqs[:first]:
            st = stamps[s]
            g = lambda dd: f"{(dd[s] - st) / 1000:9.1f}" if s in dd else "        -"  # noqa: E731
            print(f"seq {s:5d} due {(st - t0) / 1e6:6.1f}  send {g(sent)} worker read {g(wr)} answer {g(ww)}"
                  f" consumer read {g(c['seq']['r'])} listener {g(c['seq']['L'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("hook")
    h.add_argument("dir")
    s = sub.add_parser("summary")
    s.add_argument("dir")
    s.add_argument("--skip", type=int, default=5000)
    s.add_argument("--first", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "hook":
        os.makedirs(a.dir, exist_ok=True)
        with open(os.path.join(a.dir, "sitecustomize.py"), "w") as f:
            f.write(HOOK)
        print(os.path.join(a.dir, "sitecustomize.py"))
    else:
        summary(a.dir, a.skip, a.first)


if __name__ == "__main__":
    main()
