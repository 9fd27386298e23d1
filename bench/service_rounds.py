"""What the one background-service pattern costs per round, against the hand-written loop it
replaced (the flush thread's shape: wait, then work, with a try around the work).

    .venv/bin/python bench/service_rounds.py [--rounds 200000] [--repeat 5]

Both loops run a no-op round and a no-op wait on their own thread, so the figure is the loop's
own CPU per round (thread CPU time, which other load on the machine does not inflate, unlike
wall time). A SYNC_FLUSH round does one msync (tens to hundreds of µs on this machine) plus
the group-commit bookkeeping; the loop's share of it is what this reports.
"""
from __future__ import annotations

import argparse
import statistics
import threading
import time

from shmq.service import ThreadService


def _old_loop(rounds: int) -> float:
    """The removed FlushService._run, with the C wait and the work as no-ops."""
    stop = threading.Event()
    n = [0]
    out = [0.0]

    def wait(_ns: int) -> None:
        pass

    def work() -> None:
        n[0] += 1
        if n[0] >= rounds:
            stop.set()

    def run() -> None:
        t0 = time.thread_time()
        while not stop.is_set():
            wait(10_000_000)
            try:
                work()
            except Exception:  # noqa: BLE001 - as the old loop
                time.sleep(0.05)
        out[0] = time.thread_time() - t0

    th = threading.Thread(target=run)
    th.start()
    th.join()
    return out[0] / rounds


class _NoWait(ThreadService):
    def __init__(self, rounds: int):
        super().__init__("bench-rounds", 0.010)
        self.limit = rounds
        self.cpu = 0.0
        self._t0 = 0.0
        self.done = threading.Event()

    def sleep(self, seconds: float) -> None:
        pass

    def interrupt(self) -> None:
        pass

    def run_once(self) -> None:
        if self.rounds == 0:
            self._t0 = time.thread_time()
        elif self.rounds + 1 >= self.limit:
            self.cpu = time.thread_time() - self._t0
            self._stop_evt.set()
            self.done.set()


def _service_loop(rounds: int) -> float:
    svc = _NoWait(rounds)
    svc.start()
    svc.done.wait()
    svc.stop()
    return svc.cpu / (rounds - 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    old = [_old_loop(args.rounds) for _ in range(args.repeat)]
    new = [_service_loop(args.rounds) for _ in range(args.repeat)]
    mo, mn = statistics.median(old), statistics.median(new)
    print(f"# {args.repeat} runs of {args.rounds:,} rounds, thread CPU per round, median (min-max)")
    print(f"hand-written loop (old FlushService._run)  {mo * 1e9:8.0f} ns  ({min(old) * 1e9:.0f}-{max(old) * 1e9:.0f})")
    print(f"shmq.service.ThreadService                 {mn * 1e9:8.0f} ns  ({min(new) * 1e9:.0f}-{max(new) * 1e9:.0f})"
          f"  ratio {mn / mo:.2f}, +{(mn - mo) * 1e9:.0f} ns a round")


if __name__ == "__main__":
    main()
