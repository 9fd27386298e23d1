#!/usr/bin/env python3
"""Instructions per message of the pull cycle, in the live broker worker or PushConsumer process:
tcp_paths' consumer row (sync ``send()`` + a PushConsumer process, one broker worker) with the
sends paced (every pull carries one message), the chosen process run under callgrind
(a ``sitecustomize`` in a temp dir execs it under valgrind), counted for a window of N sends;
(Ir at N2 - Ir at N1) / (N2 - N1) cancels the fixed costs. Load does not move the counts.

    .venv/bin/python bench/pull_cycle_callgrind.py [--process worker|consumer] [--n 300 900] [--pace-ms 8]
                                                   [--rebalance-s 1] [--threads] [--top 25]

The consumer process rebalances every ``--rebalance-s`` (tcp_paths' 1 s by default): those
rounds are coroutines whose count in a window follows its wall time under valgrind, not N, so on
a loaded machine they move the consumer's figure by 20-40k (bench/RESULTS.md, Session 7, consc).
Each window's asyncio task steps (``task_step_impl``, inclusive: the periodic jobs; the pull
cycle itself runs in callbacks) are also printed, and the per-message figure without them;
``--rebalance-s 20`` (RocketMQ's default) leaves fewer of them in the window.

``--threads`` counts each thread apart (callgrind's ``--separate-threads``): the per-message
figure of every thread (matched by callgrind's thread number, which follows the start order), and
with ``--top K`` the K functions of the busiest one (the consumer's loop thread) with the most
inclusive instructions per message, each differenced between the two windows as the totals are.

Run from the tree to measure (its bench/ and shmq/ are used). Every process it starts is
stopped by pid; the stores and callgrind files go to a temp dir that is removed."""
import argparse, os, re, shutil, subprocess, sys, tempfile, time
from pathlib import Path

SITE = '''import os, sys
if not os.environ.get("PCG_UNDER") and (os.environ.get("SHMQ_WORKER_ID") is not None
        if os.environ["PCG_PROCESS"] == "worker" else "--consumer" in sys.argv):
    os.environ["PCG_UNDER"] = "1"
    argv = ["-m", "shmq.broker.worker.main"] if os.environ["PCG_PROCESS"] == "worker" else sys.argv
    os.execvp("valgrind", ["valgrind", "--tool=callgrind", "--instr-atstart=no"] + os.environ.get("PCG_VG", "").split() + [
                           "--callgrind-out-file=" + os.environ["PCG_OUT"] + ".%p", sys.executable] + argv)
'''


def window(n: int, pace: float, process: str, out: str, rebalance_s: float) -> None:
    sys.path[:0] = [os.getcwd(), os.path.join(os.getcwd(), "bench")]
    import psutil, tcp_paths as tp, vs_rocketmq
    from shmq import Message, Producer
    work = Path(tempfile.mkdtemp(prefix="pcg-store-"))
    pair = vs_rocketmq.ShmqPair("ASYNC_FLUSH", work, 1)
    try:
        p = Producer("pcg-pg", namesrv=pair.namesrv, local="never"); p.start()
        tp.create_topic(pair.addr, pair.namesrv, "Live", 4)
        cons = subprocess.Popen([sys.executable, "bench/tcp_paths.py", "--consumer", pair.namesrv, "Live", str(rebalance_s)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        cons.stdout.readline()
        time.sleep(25 if process == "consumer" else 2.5)  # its rebalance takes the queues
        pid = cons.pid if process == "consumer" else psutil.Process(pair.procs[1].pid).children()[0].pid
        for _ in range(50):
            p.send(Message("Live", b"x" * 100)); time.sleep(pace)
        for cmd in ("-i on", "-z"):
            subprocess.run(f"callgrind_control {cmd} {pid}", shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); time.sleep(1)
        for _ in range(n):
            p.send(Message("Live", b"x" * 100)); time.sleep(pace)
        subprocess.run(f"callgrind_control -d {pid}", shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        cons.stdin.close(); cons.stdout.readline(); cons.wait(60)
        p.shutdown()
    finally:
        pair.stop()
        shutil.rmtree(work, ignore_errors=True)


def task_steps(dump: Path) -> int:
    """The inclusive instructions of asyncio's task steps in a callgrind dump (0: none)."""
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                         capture_output=True, text=True).stdout
    m = re.search(r"^\s*([\d,]+) \([^)]*\)\s+\S*_asynciomodule\.c:task_step_impl \[", ann, re.M)
    return int(m.group(1).replace(",", "")) if m else 0


def functions(dump: Path) -> dict[str, int]:
    """Every function's inclusive instructions in a callgrind dump, by ``file:function``."""
    ann = subprocess.run(["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(dump)],
                         capture_output=True, text=True).stdout
    out: dict[str, int] = {}
    for m in re.finditer(r"^\s*([\d,]+) \([^)]*\)\s+(\S.*?)(?: \[.*\])?$", ann, re.M):
        name = m.group(2)
        out[name] = max(out.get(name, 0), int(m.group(1).replace(",", "")))
    return out


def by_thread(tmp: Path, n: int) -> dict[int, Path]:
    """A --separate-threads window's last dump of each thread: callgrind's thread number -> file."""
    out = {}
    for f in tmp.glob(f"cg{n}.*-*"):
        part = re.search(r"\.\d+\.(\d+)-(\d+)$", f.name)
        if part:  # <out>.<pid>.<part>-<thread> (the end-of-run dump, <out>.<pid>-<thread>, is not the window's)
            t = int(part.group(2))
            if t not in out or f.stat().st_mtime > out[t].stat().st_mtime:
                out[t] = f
    return out


def total(dump: Path) -> int:
    return int(re.search(r"^(?:summary|totals): (\d+)", dump.read_text(), re.M).group(1))


def threads(a, tmp: Path) -> None:
    """--threads: each thread's count per message, and the busiest one's top functions."""
    d = a.n[1] - a.n[0]
    w = [by_thread(tmp, n) for n in a.n]
    per = {t: (total(w[1][t]) - total(w[0][t])) / d for t in sorted(set(w[0]) & set(w[1]))}
    for t, v in per.items():
        print(f"thread {t}: {v:,.0f} instructions per message")
    busiest = max(per, key=per.get)
    if a.top:
        f0, f1 = functions(w[0][busiest]), functions(w[1][busiest])
        rows = sorted(((f1[k] - f0.get(k, 0)) / d, k) for k in f1)[::-1][:a.top]
        print(f"thread {busiest}, inclusive instructions per message:")
        for v, k in rows:
            print(f"  {v:10,.0f}  {k}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--process", choices=("worker", "consumer"), default="worker")
    ap.add_argument("--n", type=int, nargs=2, default=(300, 900))
    ap.add_argument("--pace-ms", type=float, default=8.0)
    ap.add_argument("--rebalance-s", type=float, default=1.0)
    ap.add_argument("--threads", action="store_true", help="each thread apart (--separate-threads)")
    ap.add_argument("--top", type=int, default=0, help="with --threads: the busiest thread's K top functions")
    ap.add_argument("--window", type=int, default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.window is not None:
        return window(a.window, a.pace_ms / 1000, a.process, os.environ["PCG_OUT"], a.rebalance_s)
    tmp = Path(tempfile.mkdtemp(prefix="pcg-"))
    try:
        (tmp / "sitecustomize.py").write_text(SITE)
        irs, steps = [], []
        for n in a.n:
            out = str(tmp / f"cg{n}")
            env = dict(os.environ, PYTHONPATH=str(tmp), PCG_PROCESS=a.process, PCG_OUT=out,
                       PCG_VG="--separate-threads=yes" if a.threads else "")
            subprocess.run([sys.executable, __file__, "--process", a.process, "--pace-ms", str(a.pace_ms),
                            "--rebalance-s", str(a.rebalance_s), "--window", str(n)], env=env, check=True,
                           stdout=subprocess.DEVNULL)
            if a.threads:
                continue
            dumps = sorted(tmp.glob(f"cg{n}.*.1"), key=lambda f: f.stat().st_size)
            irs.append(int(re.search(r"^(?:summary|totals): (\d+)", dumps[-1].read_text(), re.M).group(1)))
            steps.append(task_steps(dumps[-1]))
            print(f"N={n}: {irs[-1]:,} instructions in the window, asyncio task steps {steps[-1]:,}", flush=True)
        if a.threads:
            return threads(a, tmp)
        d = a.n[1] - a.n[0]
        print(f"{a.process}: {(irs[1] - irs[0]) / d:,.0f} instructions per message "
              f"({(irs[1] - steps[1] - irs[0] + steps[0]) / d:,.0f} without the asyncio task steps)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
