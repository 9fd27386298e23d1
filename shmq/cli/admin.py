"""``shmq topic|cluster|consumer|message|dlq ...``: the admin subcommands (argument parsing and
printing only; the work is shmq.client.admin.Admin, on the RocketMQ wire)."""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime


def _admin(args):
    from shmq.client.admin import Admin
    return Admin(args.namesrv)


def _ns(p: argparse.ArgumentParser) -> None:
    p.add_argument("-n", "--namesrv", default="127.0.0.1:9876", help="NameServer address(es), ';'-separated")


def _table(rows: list[list], header: list[str]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)] if rows else [len(h) for h in header]
    for r in [header, *rows]:
        print("  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip())


def _parse_time(text: str) -> int:
    """Milliseconds since the epoch, or an ISO time ("2026-11-30T10:00:00"), or "now", or "-1h"."""
    if text == "now":
        return int(time.time() * 1000)
    if text.startswith("-") and text[-1] in "smhd" and text[1:-1].isdigit():
        mult = {"s": 1, "m": 60, "h": 3600, "d": 86400}[text[-1]]
        return int((time.time() - int(text[1:-1]) * mult) * 1000)
    if text.isdigit():
        return int(text)
    return int(datetime.fromisoformat(text).timestamp() * 1000)


# ---- topic -------------------------------------------------------------------------------
def topic_run(args) -> int:
    with _admin(args) as a:
        if args.action == "create":
            brokers = a.create_topic(args.topic, args.queues, args.perm, args.cluster, args.order)
            print(f"created {args.topic} ({args.queues} queues) on {', '.join(brokers)}")
        elif args.action == "delete":
            a.delete_topic(args.topic, args.cluster)
            print(f"deleted {args.topic}")
        elif args.action == "list":
            for t in a.topic_list():
                print(t)
        elif args.action == "route":
            from shmq.protocol.bodies import encode_topic_route
            print(json.dumps(json.loads(encode_topic_route(a.route(args.topic), standard_json=True)), indent=1))
    return 0


# ---- cluster -----------------------------------------------------------------------------
def cluster_run(args) -> int:
    """The older spelling of mqadmin's ``clusterList``: one implementation, two names."""
    from .mqadmin import cluster_list
    from .output import Out
    return cluster_list(args, Out(False))


# ---- consumer ----------------------------------------------------------------------------
def consumer_run(args) -> int:
    with _admin(args) as a:
        if args.action == "progress":
            rows = a.consumer_progress(args.group, [args.topic] if args.topic else None)
            _table([[r.topic, r.broker_name, r.queue_id, r.broker_offset, r.consumer_offset, r.lag] for r in rows],
                   ["topic", "broker", "queue", "broker offset", "consumer offset", "lag"])
            print(f"total lag: {sum(r.lag for r in rows)}")
        elif args.action == "reset-offset":
            if not args.topic:
                print("reset-offset needs GROUP TOPIC", file=sys.stderr)
                return 2
            ts = _parse_time(args.timestamp)
            table = a.reset_offset(args.group, args.topic, ts)
            _table([[b, q, o] for (b, q), o in sorted(table.items())], ["broker", "queue", "new offset"])
    return 0


# ---- message -----------------------------------------------------------------------------
def _show(m) -> dict:
    return {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "queueId": m.queue_id,
            "queueOffset": m.queue_offset, "tags": m.tags, "keys": m.keys, "reconsumeTimes": m.reconsume_times,
            "bornTimestamp": m.born_timestamp, "storeTimestamp": m.store_timestamp,
            "properties": m.properties, "body": m.body.decode("utf-8", "replace")}


def message_run(args) -> int:
    with _admin(args) as a:
        if args.action == "query":
            msgs = a.query_by_key(args.topic, args.key, args.max,
                                  _parse_time(args.begin) if args.begin else 0,
                                  _parse_time(args.end) if args.end else None)
            for m in msgs:
                print(json.dumps(_show(m)))
            if not msgs:
                print(f"no message with key {args.key} in {args.topic}", file=sys.stderr)
                return 1
        elif args.action == "view":
            print(json.dumps(_show(a.view(args.msg_id, args.topic)), indent=1))
    return 0


# ---- dlq ---------------------------------------------------------------------------------
def dlq_run(args) -> int:
    from shmq.client.producer import Producer
    from .output import Progress
    with _admin(args) as a, Producer("TOOLS_DLQ_RESEND", args.namesrv, local="never") as p, \
            Progress(f"resend %DLQ%{args.group}") as bar:
        n = a.dlq_resend(args.group, p, args.msg_id, progress=bar)
    print(f"re-sent {n} message(s) from %DLQ%{args.group}")
    return 0 if n or not args.msg_id else 1


def add_parsers(sub) -> None:
    p = sub.add_parser("topic", help="create, delete, list topics; show a route")
    p.add_argument("action", choices=["create", "delete", "list", "route"])
    p.add_argument("topic", nargs="?")
    p.add_argument("-q", "--queues", type=int, default=4)
    p.add_argument("--perm", type=int, default=6)
    p.add_argument("-c", "--cluster", default=None)
    p.add_argument("--order", action="store_true")
    _ns(p)
    p.set_defaults(_run=topic_run)

    p = sub.add_parser("cluster", help="brokers of every cluster with their runtime info")
    p.add_argument("action", choices=["list"])
    _ns(p)
    p.set_defaults(_run=cluster_run)

    p = sub.add_parser("consumer", help="a group's progress (lag per queue); reset its offsets by time")
    p.add_argument("action", choices=["progress", "reset-offset"])
    p.add_argument("group")
    p.add_argument("topic", nargs="?")
    p.add_argument("--timestamp", default="now", help="ms since epoch, ISO time, 'now', or '-1h' (reset-offset)")
    _ns(p)
    p.set_defaults(_run=consumer_run)

    p = sub.add_parser("message", help="query messages by key, view one by id")
    p.add_argument("action", choices=["query", "view"])
    p.add_argument("msg_id", nargs="?", help="message id (view)")
    p.add_argument("--key", help="key to look up (query)")
    p.add_argument("--topic", help="topic (query; view by UNIQ_KEY)")
    p.add_argument("--max", type=int, default=32)
    p.add_argument("--begin", default=None)
    p.add_argument("--end", default=None)
    _ns(p)
    p.set_defaults(_run=message_run)

    p = sub.add_parser("dlq", help="re-send dead letters of a group to their topic")
    p.add_argument("action", choices=["resend"])
    p.add_argument("group")
    p.add_argument("msg_id", nargs="?")
    _ns(p)
    p.set_defaults(_run=dlq_run)
