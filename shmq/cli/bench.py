"""``shmq-bench``: shmq's latency and throughput side by side with its peers. Argument parsing
only; the harness is :mod:`shmq.bench` (runner, engine, peers).

    shmq-bench                         # the standard suite (< 90 s), one table
    shmq-bench --json r.json --plot r.png
    shmq-bench e2e --rate 20000 --duration 5 --peers zmq,redis
    shmq-bench produce --transport tcp --batch 32 --producers 2
    shmq-bench curve list              # the scaling curves
    shmq-bench curve size --out bench/curves
"""
from __future__ import annotations

import argparse
import os
import sys

from shmq.bench import scenarios


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shmq-bench", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Latency and throughput of shmq beside multiprocessing.Queue, faster-fifo, pyzmq (ipc) and "
                    "Redis Streams, moving the same messages between the same processes. With no scenario: the "
                    "standard suite (local and TCP produce, e2e latency at 10,000 msgs/s, sync-flush).",
        epilog="Scaling curves: shmq-bench curve list. Scenarios: produce (throughput), e2e (latency at a fixed rate), pull (drain a backlog of --count), "
               "sync-flush (every send on disk first). Latency at a fixed --rate is measured from each message's "
               "intended send time (coordinated omission corrected).")
    p.add_argument("scenario", nargs="?", choices=scenarios.KINDS, help="one scenario (default: the standard suite)")
    p.add_argument("--transport", choices=scenarios.TRANSPORTS, default=None,
                   help="shmq client path: local (shared memory) or tcp (remoting); default local")
    p.add_argument("--size", type=int, default=None, help="message body bytes (default 100, at least 16)")
    p.add_argument("--batch", type=int, default=None, help="messages per send call (send_batch); default 1")
    p.add_argument("--producers", type=int, default=None, help="producer processes (default 1; sync-flush 4)")
    p.add_argument("--consumers", type=int, default=None, help="consumer processes (default 1)")
    p.add_argument("--rate", type=float, default=None, help="total msgs/s, fixed (default: as fast as possible; e2e 10000)")
    p.add_argument("--duration", type=float, default=None, help="measured seconds (default 2)")
    p.add_argument("--warmup", type=float, default=None, help="seconds before the measured window (default 0.5)")
    p.add_argument("--count", type=int, default=None, help="send exactly N messages instead (pull: the backlog)")
    p.add_argument("--send-mode", choices=scenarios.SEND_MODES, default=None,
                   help="how shmq's producer sends: sync (send(), each call waits for its answer: the default, "
                        "as RocketMQ's DefaultMQProducer.send), async (send_async with at most --send-window "
                        "unanswered) or oneway (send_oneway); latency is still from each message's intended "
                        "send time to the consumer")
    p.add_argument("--send-window", type=int, default=None,
                   help="async: sends in flight at most (default 1024)")
    p.add_argument("--peers", default=None,
                   help="comma-separated peers: mpqueue, faster-fifo, zmq, redis (default: these four; 'none' for none); "
                        "py-floor, futex-limit, spin-limit, page-floor, tcp-limit: the machine's limits "
                        "(bench/peers/limits.py, tcp_limit.py), when named")
    p.add_argument("--shmq", default=None, help="shmq rows: shmq (client API), shmq-store (store direct); default both")
    p.add_argument("--json", metavar="FILE", help="write the results (schema shmq-bench/1) here")
    p.add_argument("--plot", metavar="FILE.png", help="write the latency spectrum and throughput bars here")
    p.add_argument("--workers", type=int, default=None, help="broker worker processes (default: the broker's)")
    p.add_argument("--spin-us", type=float, default=None,
                   help="local shmq consumers spin this long before sleeping on the store's futex (default 50; "
                        "2000000: busy-polling; also SHMQ_BENCH_SPIN_US)")
    p.add_argument("--pin", action="store_true", default=os.environ.get("SHMQ_BENCH_PIN") == "1",
                   help="each producer and consumer process on a CPU of its own (round robin over the CPUs "
                        "it may use), for every row alike; the broker and the harness are not pinned "
                        "(also SHMQ_BENCH_PIN=1)")
    p.add_argument("--quick", action="store_true", default=os.environ.get("SHMQ_BENCH_QUICK") == "1",
                   help="a seconds-long version (tests; also SHMQ_BENCH_QUICK=1)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, stores)")
    p.add_argument("--no-progress", action="store_true", help="no live progress line")
    return p


def build_curve_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="shmq-bench curve", description="A scaling curve: one figure swept over a range of points, "
        "printed as a table, written as JSON (--json) and a PNG (--plot), or both into --out DIR.")
    p.add_argument("name", help="the curve ('list' shows them; 'all' runs every one, with --out)")
    p.add_argument("--points", help="comma-separated values to sweep instead of the curve's own (e.g. 100,4K,1M)")
    p.add_argument("--series", help="comma-separated series to run (default all of the curve's, e.g. local,tcp)")
    p.add_argument("--duration", type=float, default=None, help="measured seconds per point (default 2)")
    p.add_argument("--warmup", type=float, default=None, help="seconds before each measured window (default 0.5)")
    p.add_argument("--rate", type=float, default=None, help="fixed total msgs/s (e2e latency) instead of full speed")
    p.add_argument("--size", type=int, default=None, help="message body bytes where the curve does not sweep it")
    p.add_argument("--total", default=None, help="backlog bytes (backlog curve; e.g. 10G)")
    p.add_argument("--connections", type=int, default=None, help="idle connections (memory curve)")
    p.add_argument("--json", metavar="FILE", help="write the points (schema shmq-bench-curve/1) here")
    p.add_argument("--plot", metavar="FILE.png", help="write the curve's PNG here")
    p.add_argument("--out", metavar="DIR", help="write DIR/curve-<name>.json and .png")
    p.add_argument("--dir", metavar="DIR", help="temporary stores under DIR (default the system temp dir)")
    p.add_argument("--workers", type=int, default=None, help="broker worker processes (default: the broker's)")
    p.add_argument("--quick", action="store_true", default=os.environ.get("SHMQ_BENCH_QUICK") == "1",
                   help="the curve's two tiny points, short windows (tests; also SHMQ_BENCH_QUICK=1)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (logs, stores)")
    p.add_argument("--no-progress", action="store_true", help="no live progress line")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    curve = bool(argv) and argv[0] == "curve"
    args = build_curve_parser().parse_args(argv[1:]) if curve else build_parser().parse_args(argv)
    if getattr(args, "spin_us", None) is not None:
        os.environ["SHMQ_BENCH_SPIN_US"] = f"{args.spin_us:g}"  # read by the consumer children (bench/peers)
    if getattr(args, "pin", False):
        os.environ["SHMQ_BENCH_PIN"] = "1"  # read by every producer and consumer child (bench/engine.py)
    from shmq.bench import curve_main, main as bench_main
    try:
        return curve_main.run(args) if curve else bench_main.run(args)
    except ValueError as e:
        print(f"shmq-bench: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
