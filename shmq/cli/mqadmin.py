"""mqadmin's daily commands under their own names (``shmq topicStatus -t T``, ``shmq
consumerProgress -g G`` ...), with mqadmin's option letters, an aligned table or ``--json``,
a hint with every error, and a progress bar for long work. Argument parsing and printing only:
the work is :class:`shmq.client.admin.Admin` on the RocketMQ wire. The message commands
(query, send, consume, print) are in :mod:`shmq.cli.mqadmin_msg`.
"""
from __future__ import annotations

import time

from .output import Out, Progress, guarded


def admin(args):
    from shmq.client.admin import Admin
    return Admin(args.namesrv, access_key=getattr(args, "access_key", None), secret_key=getattr(args, "secret_key", None))


def acl_kwargs(args) -> dict:
    """The ACL account for a Producer the command makes."""
    return {"access_key": getattr(args, "access_key", None), "secret_key": getattr(args, "secret_key", None)}


def ts(text: str | None, default: int | None = None) -> int | None:
    """mqadmin's time arguments: ms since the epoch, ``yyyy-MM-dd#HH:mm:ss:SSS``, ISO, "now" or "-1h"."""
    if text is None:
        return default
    from .admin import _parse_time
    if "#" in text:
        from datetime import datetime
        day, _, clock = text.partition("#")
        hms, _, ms = clock.rpartition(":") if clock.count(":") == 3 else (clock, "", "0")
        return int(datetime.fromisoformat(f"{day}T{hms}").timestamp() * 1000) + int(ms or 0)
    return _parse_time(text)


def when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) + f".{ms % 1000:03d}" if ms > 0 else "-"


# ---- topics -------------------------------------------------------------------------------
def topic_list(args, out: Out) -> int:
    with admin(args) as a:
        topics = a.topic_list()
        if not args.with_groups:
            out.table(["topic"], [[t] for t in topics])
            return 0
        info = a.cluster_info()
        cluster_of = {b: c for c, names in info.clusterAddrTable.items() for b in names}
        rows = []
        for t in topics:
            if t.startswith(("%RETRY%", "%DLQ%")):
                continue
            try:
                route = a.route(t)
                groups = a.consumed_by(t)
            except Exception:  # a topic without a route or a broker without code 300: still listed
                route, groups = None, []
            clusters = sorted({cluster_of.get(bd.brokerName, "") for bd in route.brokerDatas}) if route else [""]
            for g in groups or [""]:
                rows.append([",".join(clusters), t, g])
        out.table(["cluster", "topic", "consumer group"], rows)
    return 0


def topic_route(args, out: Out) -> int:
    import json
    from shmq.protocol.bodies import encode_topic_route
    with admin(args) as a:
        out.obj(json.loads(encode_topic_route(a.route(args.topic), standard_json=True)))
    return 0


def topic_status(args, out: Out) -> int:
    with admin(args) as a:
        rows = a.topic_status(args.topic)
    out.table(["broker", "queue", "min offset", "max offset", "last updated"],
              [[r.broker_name, r.queue_id, r.min_offset, r.max_offset, when(r.last_update_ms)] for r in rows], rows)
    return 0


def update_topic(args, out: Out) -> int:
    with admin(args) as a:
        brokers = a.create_topic(args.topic, args.write_queues, args.perm, args.cluster, args.order, args.broker)
    out.obj({"topic": args.topic, "brokers": brokers, "queues": args.write_queues},
            f"create topic {args.topic} ({args.write_queues} queues, perm {args.perm}) on {', '.join(brokers)}: success")
    return 0


def delete_topic(args, out: Out) -> int:
    with admin(args) as a:
        a.delete_topic(args.topic, args.cluster)
    out.obj({"topic": args.topic, "deleted": True}, f"delete topic {args.topic}: success")
    return 0


# ---- cluster and brokers -----------------------------------------------------------------
def cluster_list(args, out: Out) -> int:
    with admin(args) as a:
        info = a.cluster_info()
        rows, recs = [], []
        for cluster, names in sorted(info.clusterAddrTable.items()):
            for name in sorted(names):
                bd = info.brokerAddrTable.get(name)
                for bid, addr in sorted((bd.brokerAddrs if bd else {}).items()):
                    try:
                        rt = a.runtime_info(addr)
                    except Exception as e:  # a broker that does not answer is shown, not fatal
                        rt = {"error": str(e)}
                    rows.append([cluster, name, bid, addr, rt.get("brokerVersionDesc", rt.get("error", "")),
                                 rt.get("putTps", "").split(" ")[0], rt.get("getTransferedTps", "").split(" ")[0],
                                 rt.get("commitLogMaxOffset", ""), rt.get("commitLogDiskRatio", "")])
                    recs.append({"cluster": cluster, "brokerName": name, "brokerId": bid, "addr": addr, "runtime": rt})
        out.table(["cluster", "broker", "id", "address", "version", "in tps", "out tps", "commitlog max", "disk ratio"],
                  rows, recs)
    return 0


def _broker_addrs(a, args) -> list[str]:
    if getattr(args, "broker", None):
        return [args.broker]
    return sorted(a.masters(getattr(args, "cluster", None)).values())


def broker_status(args, out: Out) -> int:
    with admin(args) as a:
        tables = {addr: a.runtime_info(addr) for addr in _broker_addrs(a, args)}
    if out.as_json:
        out.obj(tables)
        return 0
    for addr, table in tables.items():
        out.table(["key", "value"] if len(tables) == 1 else ["broker", "key", "value"],
                  [([k, v] if len(tables) == 1 else [addr, k, v]) for k, v in sorted(table.items())])
    return 0


def get_broker_config(args, out: Out) -> int:
    with admin(args) as a:
        configs = {addr: a.broker_config(addr) for addr in _broker_addrs(a, args)}
    if out.as_json:
        out.obj(configs)
        return 0
    for addr, cfg in configs.items():
        out.line(f"============{addr}============")
        out.table(["key", "value"], sorted(cfg.items()))
    return 0


def clean_expired_cq(args, out: Out) -> int:
    with admin(args) as a:
        done = a.clean_expired_cq(args.cluster, args.broker)
    out.obj(done, "\n".join(f"{addr}: {'cleaned' if ok else 'failed'}" for addr, ok in done.items()))
    return 0 if all(done.values()) else 1


# ---- groups -------------------------------------------------------------------------------
def consumer_progress(args, out: Out) -> int:
    with admin(args) as a:
        rows = a.consume_stats(args.group, args.topic)
    rows.sort(key=lambda r: (r.topic, r.broker_name, r.queue_id))
    out.table(["topic", "broker", "queue", "broker offset", "consumer offset", "diff"],
              [[r.topic, r.broker_name, r.queue_id, r.broker_offset, r.consumer_offset, r.lag] for r in rows],
              [dict(topic=r.topic, brokerName=r.broker_name, queueId=r.queue_id, brokerOffset=r.broker_offset,
                    consumerOffset=r.consumer_offset, diff=r.lag) for r in rows])
    out.line(f"Diff Total: {sum(r.lag for r in rows)}")
    return 0


def consumer_connection(args, out: Out) -> int:
    with admin(args) as a:
        gc = a.consumer_connections(args.group)
    if out.as_json:
        out.obj(gc)
        return 0
    out.table(["#", "client id", "client addr", "language", "version"],
              [[i + 1, c.client_id, c.client_addr, c.language, c.version] for i, c in enumerate(gc.connections)])
    out.line("")
    out.table(["topic", "subscription"], sorted(gc.subscriptions.items()))
    out.line(f"\nConsumeType: {gc.consume_type}\nMessageModel: {gc.message_model}\nConsumeFromWhere: {gc.consume_from_where}")
    return 0


def producer_connection(args, out: Out) -> int:
    with admin(args) as a:
        conns = a.producer_connections(args.group, args.topic)
    out.table(["#", "client id", "client addr", "language", "version"],
              [[i + 1, c.client_id, c.client_addr, c.language, c.version] for i, c in enumerate(conns)], conns)
    return 0


def reset_offset_by_time(args, out: Out) -> int:
    with admin(args) as a:
        total = len(list(a.queues(args.topic)))
        with Progress(f"reset {args.group} on {args.topic}", total) as p:
            table = a.reset_offset(args.group, args.topic, ts(args.timestamp), progress=p)
    out.table(["broker", "queue", "new offset"], [[b, q, o] for (b, q), o in sorted(table.items())],
              [dict(brokerName=b, queueId=q, offset=o) for (b, q), o in sorted(table.items())])
    return 0


def update_sub_group(args, out: Out) -> int:
    settings = {k: v for k, v in dict(consumeEnable=args.consume_enable, consumeFromMinEnable=args.from_min,
                                      consumeBroadcastEnable=args.broadcast, retryQueueNums=args.retry_queues,
                                      retryMaxTimes=args.retry_max, brokerId=args.broker_id).items() if v is not None}
    with admin(args) as a:
        addrs = a.update_sub_group(args.group, args.cluster, args.broker, **settings)
    out.obj({"group": args.group, "brokers": addrs}, f"create subscription group {args.group} on {', '.join(addrs)}: success")
    return 0


def delete_sub_group(args, out: Out) -> int:
    with admin(args) as a:
        addrs = a.delete_sub_group(args.group, args.cluster, args.broker, clean_offset=not args.keep_offsets)
    out.obj({"group": args.group, "brokers": addrs}, f"delete subscription group {args.group} from {', '.join(addrs)}: success")
    return 0


def _tps(a, addrs, name: str, key: str) -> str:
    """statsMinute tps summed over the brokers (VIEW_BROKER_STATS_DATA), "-" where none keeps it."""
    total, any_ = 0.0, False
    for addr in addrs:
        try:
            d = a.stats_data(addr, name, key)
        except Exception:  # a broker without code 315: no figure rather than no table
            d = None
        if d and "statsMinute" in d:
            total += float(d["statsMinute"].get("tps", 0.0))
            any_ = True
    return f"{total:.2f}" if any_ else "-"


def stats_all(args, out: Out) -> int:
    rows = []
    with admin(args) as a:
        topics = [args.topic] if args.topic else [t for t in a.topic_list() if not t.startswith(("%", "RMQ_SYS", "SCHEDULE_TOPIC"))]
        with Progress("statsAll", len(topics)) as p:
            for i, t in enumerate(topics):
                try:
                    groups = a.consumed_by(t)
                    addrs = list(a.brokers_of(t).values())
                except Exception:  # no route (deleted meanwhile) or no code 300: no groups shown
                    groups, addrs = [], []
                in_tps = _tps(a, addrs, "TOPIC_PUT_NUMS", t)
                for g in groups:
                    lag = sum(r.lag for r in a.consume_stats(g, t))
                    if not args.active or lag:
                        rows.append([t, g, lag, in_tps, _tps(a, addrs, "GROUP_GET_NUMS", f"{t}@{g}")])
                if not groups and not args.active:
                    rows.append([t, "", 0, in_tps, "-"])
                p(i + 1)
    out.table(["topic", "consumer group", "accumulation", "in tps", "out tps"], rows)
    return 0
