"""mqadmin's message commands: queryMsgById, queryMsgByKey, queryMsgByUniqueKey,
queryMsgByOffset, sendMessage, consumeMessage, printMsg (argument handling and printing only)."""
from __future__ import annotations

from shmq.errors import ShmqError

from .mqadmin import acl_kwargs, admin, ts, when
from .output import Out, Progress


def show(m, body: bool = True) -> dict:
    d = {"msgId": m.msg_id, "offsetMsgId": m.offset_msg_id, "topic": m.topic, "brokerName": m.broker_name,
         "queueId": m.queue_id, "queueOffset": m.queue_offset, "tags": m.tags, "keys": m.keys,
         "reconsumeTimes": m.reconsume_times, "bornTimestamp": m.born_timestamp,
         "storeTimestamp": m.store_timestamp, "properties": m.properties}
    if body:
        d["body"] = m.body.decode("utf-8", "replace")
    return d


def _detail(out: Out, m) -> None:
    d = show(m)
    if out.as_json:
        out.obj(d)
        return
    rows = [[k, v] for k, v in d.items() if k not in ("properties", "body", "bornTimestamp", "storeTimestamp")]
    rows += [["bornTimestamp", when(m.born_timestamp)], ["storeTimestamp", when(m.store_timestamp)],
             ["properties", m.properties], ["body", d["body"]]]
    out.table(["field", "value"], rows)


def _list(out: Out, msgs) -> None:
    out.table(["msgId", "queue", "offset", "tags", "keys", "stored"],
              [[m.msg_id, m.queue_id, m.queue_offset, m.tags or "", ",".join(m.keys), when(m.store_timestamp)]
               for m in msgs], [show(m) for m in msgs])


def query_by_id(args, out: Out) -> int:
    with admin(args) as a:
        _detail(out, a.view(args.msg_id, args.topic))
    return 0


def query_by_key(args, out: Out) -> int:
    with admin(args) as a:
        msgs = a.query_by_key(args.topic, args.key, args.max, ts(args.begin, 0), ts(args.end))
    if not msgs:
        raise ShmqError(f"no message with key {args.key!r} in topic {args.topic} (the index may lag the send by a flush)")
    _list(out, msgs)
    return 0


def query_by_unique_key(args, out: Out) -> int:
    with admin(args) as a:
        _detail(out, a.view(args.msg_id, args.topic))
    return 0


def _broker_addr(a, topic: str, broker: str) -> str:
    addrs = a.brokers_of(topic)
    if broker not in addrs:
        raise ShmqError(f"broker {broker!r} does not serve topic {topic} (it has: {', '.join(sorted(addrs)) or 'none'})")
    return addrs[broker]


def query_by_offset(args, out: Out) -> int:
    with admin(args) as a:
        addr = _broker_addr(a, args.topic, args.broker)
        msgs, _ = a.read_queue(args.topic, addr, args.queue, args.offset, 1)
        if not msgs or msgs[0].queue_offset != args.offset:
            raise ShmqError(f"no message at offset {args.offset} of {args.topic}:{args.broker}:{args.queue}")
        msgs[0].broker_name = args.broker
        _detail(out, msgs[0])
    return 0


def send_message(args, out: Out) -> int:
    from shmq.client.message import Message, MessageQueue
    from shmq.client.producer import Producer
    with Producer("TOOLS_SEND_MESSAGE", args.namesrv, local="never", **acl_kwargs(args)) as p:
        msg = Message(args.topic, args.body.encode(), args.tags, args.keys.split(",") if args.keys else None)
        if args.broker is not None and args.queue is not None:
            r = p.send_to_queue(msg, MessageQueue(args.topic, args.broker, args.queue))
        else:
            r = p.send(msg)
    out.table(["broker", "queue", "send status", "msgId"],
              [[r.queue.broker_name, r.queue.queue_id, r.status.name, r.msg_id]],
              [{"brokerName": r.queue.broker_name, "queueId": r.queue.queue_id, "sendStatus": r.status.name, "msgId": r.msg_id,
                "offsetMsgId": r.offset_msg_id, "queueOffset": r.queue_offset}])
    return 0


def _selected(a, topic: str, broker: str | None, queue: int | None):
    return [(b, addr, q) for b, addr, q in a.queues(topic)
            if (broker is None or b == broker) and (queue is None or q == queue)]


def consume_message(args, out: Out) -> int:
    """Read (no offsets committed) up to ``-c`` messages from the queues asked, from ``-o`` or
    the first message stored at/after ``-s``, up to ``-e``."""
    begin, end = ts(args.begin), ts(args.end)
    got = []
    with admin(args) as a:
        for b, addr, q in _selected(a, args.topic, args.broker, args.queue):
            start = args.offset if args.offset is not None else a.offset_by_time(addr, args.topic, q, begin or 0)
            for m in a.read_range(args.topic, addr, q, start):
                if end is not None and m.store_timestamp > end:
                    break
                m.broker_name = b
                got.append(m)
                if len(got) >= args.count:
                    break
            if len(got) >= args.count:
                break
    _list(out, got)
    return 0


def print_msg(args, out: Out) -> int:
    """Every message of a topic stored in [begin, end), queue by queue, with a progress bar."""
    begin, end = ts(args.begin, 0), ts(args.end)
    got = []
    with admin(args) as a:
        queues = _selected(a, args.topic, None, None)
        with Progress(f"printMsg {args.topic}", len(queues)) as p:
            for i, (b, addr, q) in enumerate(queues):
                start = a.offset_by_time(addr, args.topic, q, begin)
                for m in a.read_range(args.topic, addr, q, start):
                    if end is not None and m.store_timestamp >= end:
                        break
                    if args.tags in (None, "*") or m.tags in args.tags.split("||"):
                        m.broker_name = b
                        got.append(m)
                p(i + 1)
    if out.as_json:
        out.obj([show(m, args.print_body) for m in got])
        return 0
    for m in got:
        body = f" BODY: {m.body.decode(args.charset, 'replace')}" if args.print_body else ""
        out.line(f"MSGID: {m.msg_id} BROKER: {m.broker_name} QUEUE: {m.queue_id} OFFSET: {m.queue_offset} "
                 f"TAGS: {m.tags or ''} KEYS: {','.join(m.keys)} STORED: {when(m.store_timestamp)}{body}")
    return 0
