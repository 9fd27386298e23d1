"""The producer and consumer processes of a chaos run (``python -m shmq.chaos.actors``).

``produce``: a :class:`shmq.Producer` (``--local always`` for the shared-memory path,
``never`` for TCP) sends one message per id to the topic at ``--rate`` per second, each
attempt under a new id, and appends the id to its ack file when the send returned SEND_OK
(a send that raised or answered anything else is not acknowledged; it may still be stored,
which the check reports as "stored, never acknowledged"). ``consume``: a
:class:`shmq.PushConsumer` that appends every delivered message's id to its file, or
``G <id>`` when the body does not match its id's checksum (or its key).

Both print ``ready`` once started and stop at SIGTERM; the harness kills them with SIGKILL.
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time

from .ledger import AppendLog
from .payload import body_for, parse


def _stop_event() -> threading.Event:
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def produce(args: argparse.Namespace) -> int:
    from shmq import Message, Producer
    from shmq.client.message import SendStatus
    stop = _stop_event()
    acks = AppendLog(args.file, fsync_every=args.fsync_every)
    p = Producer(f"chaos-{args.local}", args.namesrv, local=args.local, send_timeout=3.0).start()
    print("ready", flush=True)
    seq = failures = 0
    pace = 1.0 / args.rate if args.rate > 0 else 0.0
    next_at = time.monotonic()
    while not stop.is_set():
        msg_id = f"{args.name}.{seq}"
        seq += 1
        try:
            r = p.send(Message(args.topic, body_for(msg_id), keys=[msg_id]))
        except Exception as e:  # noqa: BLE001 - the broker is down or restarting: not acknowledged
            failures += 1
            if failures % 50 == 1:
                logging.getLogger("shmq.chaos").info("%s: send failed: %s: %s", args.name, type(e).__name__, e)
            stop.wait(0.05)
            continue
        if r.status is SendStatus.SEND_OK:
            acks.add(msg_id)
        next_at = max(next_at + pace, time.monotonic() - 1.0)
        if pace and next_at > time.monotonic():
            stop.wait(next_at - time.monotonic())
    acks.close()
    p.shutdown()
    return 0


def consume(args: argparse.Namespace) -> int:
    from shmq import ConsumeResult, PushConsumer
    stop = _stop_event()
    log = AppendLog(args.file)
    lock = threading.Lock()

    def listener(msgs):
        with lock:   # one writer per file: lines never interleave
            for m in msgs:
                msg_id, intact = parse(bytes(m.body))
                if intact and m.keys and msg_id not in m.keys:
                    intact = False
                log.add(msg_id if intact else f"G {msg_id or '?'}")
        return ConsumeResult.SUCCESS

    c = PushConsumer(args.group, args.namesrv, local=args.local, consume_from="FIRST_OFFSET",
                     rebalance_interval=1.0, persist_interval=0.5)
    c.subscribe(args.topic, "*")
    c.on_message(listener)
    c.start()
    print("ready", flush=True)
    stop.wait()
    c.shutdown()
    with lock:
        log.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m shmq.chaos.actors")
    p.add_argument("role", choices=("produce", "consume"))
    p.add_argument("--namesrv", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--local", choices=("always", "never"), required=True)
    p.add_argument("--file", required=True, help="the ack file (produce) or delivery file (consume)")
    p.add_argument("--name", default="p", help="id prefix (produce)")
    p.add_argument("--group", default="chaos", help="consumer group (consume)")
    p.add_argument("--rate", type=float, default=200.0, help="sends per second (produce; 0 = no pacing)")
    p.add_argument("--fsync-every", type=int, default=0, help="fsync the ack file every N acks (produce)")
    args = p.parse_args(argv)
    logging.basicConfig(level=os.environ.get("SHMQ_LOG_LEVEL", "WARNING").upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s[%(process)d]: %(message)s")
    return produce(args) if args.role == "produce" else consume(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
