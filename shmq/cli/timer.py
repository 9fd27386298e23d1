"""``shmq timer send|recall``: schedule a message at a time or after a delay (RocketMQ 5 timer
message), and recall it by the handle the send printed (RECALL_MESSAGE). Parsing and
printing only; the work is shmq.client.Producer's."""
from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timezone


def _deliver_at(text: str) -> int:
    """Epoch milliseconds, or an ISO time (local time when it names no zone)."""
    if text.isdigit():
        return int(text)
    t = datetime.fromisoformat(text)
    if t.tzinfo is None:
        t = t.astimezone()
    return int(t.astimezone(timezone.utc).timestamp() * 1000)


def _delay_s(text: str) -> float:
    """"90", "90s", "1500ms", "5m", "2h", "1d" -> seconds."""
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    for u in ("ms", "s", "m", "h", "d"):
        if text.endswith(u) and text[:-len(u)].replace(".", "", 1).isdigit():
            return float(text[:-len(u)]) * units[u]
    return float(text)


def add_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("timer", help="send a timer message (at a time or after a delay); recall one")
    p.add_argument("action", choices=["send", "recall"])
    p.add_argument("topic")
    p.add_argument("body_or_handle", help="the body (send) or the recall handle the send printed (recall)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--delay", help="send: after this long (90s, 1500ms, 5m, 2h)")
    g.add_argument("--at", help="send: at this time (epoch ms or ISO time)")
    p.add_argument("--tags", default=None)
    p.add_argument("--keys", default=None)
    p.add_argument("-n", "--namesrv", default="127.0.0.1:9876", help="NameServer address(es), ';'-separated")
    return p


def run(args) -> int:
    from shmq.client import Message, Producer
    from shmq.errors import ShmqError
    try:
        with Producer("TOOLS_TIMER", args.namesrv, local="never") as p:
            if args.action == "recall":
                print(json.dumps({"recalled": p.recall(args.topic, args.body_or_handle)}))
                return 0
            if not (args.delay or args.at):
                print("timer send needs --delay or --at", file=sys.stderr)
                return 2
            kw = {"delay": _delay_s(args.delay)} if args.delay else {"deliver_at": _deliver_at(args.at)}
            r = p.send(Message(args.topic, args.body_or_handle.encode(), tags=args.tags, keys=args.keys, **kw))
            print(json.dumps({"msgId": r.msg_id, "status": str(r.status.value), "queue": r.queue.queue_id,
                              "recallHandle": r.recall_handle}))
            return 0
    except (ShmqError, ValueError) as e:
        print(f"timer {args.action} failed: {e}", file=sys.stderr)
        return 1
