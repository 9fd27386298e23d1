"""Argument parsers of the mqadmin-named commands: mqadmin's own option letters, plus
``--json`` on every command. A table: command -> (function, help, options)."""
from __future__ import annotations

import argparse

from . import mqadmin as A
from . import mqadmin_msg as M
from .output import Out, guarded

def _bool(text: str) -> bool:
    if text.lower() in ("true", "1", "yes"):
        return True
    if text.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


T = (("-t", "--topic"), dict(required=True, help="topic"))
T_OPT = (("-t", "--topic"), dict(default=None, help="topic"))
G = (("-g", "--group"), dict(required=True, help="consumer group"))
C = (("-c", "--cluster"), dict(default=None, help="cluster name"))
B = (("-b", "--broker"), dict(default=None, help="broker address host:port"))
BEGIN = (("-b", "--begin"), dict(default=None, help="begin time: ms, yyyy-MM-dd#HH:mm:ss:SSS, ISO, now, -1h"))
END = (("-e", "--end"), dict(default=None, help="end time (same forms)"))
BNAME = (("-b", "--broker"), dict(default=None, help="broker name"))
QID = (("-i", "--queue"), dict(type=int, default=None, help="queue id"))

COMMANDS = {
    "topicList": (A.topic_list, "every topic (-c: with the groups consuming it)",
                  [(("-c", "--with-groups"), dict(action="store_true", help="list consumer groups too"))]),
    "topicRoute": (A.topic_route, "a topic's route (brokers, queues)", [T]),
    "topicStatus": (A.topic_status, "min/max offset and last update of each queue", [T]),
    "updateTopic": (A.update_topic, "create or update a topic", [
        T, C, B, (("-r", "--read-queues"), dict(type=int, default=8)), (("-w", "--write-queues"), dict(type=int, default=8)),
        (("-p", "--perm"), dict(type=int, default=6)), (("-o", "--order"), dict(action="store_true"))]),
    "deleteTopic": (A.delete_topic, "delete a topic from brokers and NameServers", [T, C]),
    "clusterList": (A.cluster_list, "brokers of every cluster with their runtime figures", []),
    "brokerStatus": (A.broker_status, "a broker's runtime info (every key)", [B, C]),
    "getBrokerConfig": (A.get_broker_config, "a broker's settings", [B, C]),
    "cleanExpiredCQ": (A.clean_expired_cq, "remove ConsumeQueue files of expired CommitLog", [B, C]),
    "consumerProgress": (A.consumer_progress, "a group's offsets and lag per queue", [G, T_OPT]),
    "consumerConnection": (A.consumer_connection, "a group's online consumers and subscriptions", [G]),
    "producerConnection": (A.producer_connection, "a producer group's connections", [G, T_OPT]),
    "resetOffsetByTime": (A.reset_offset_by_time, "move a group's offsets to a time", [
        G, T, (("-s", "--timestamp"), dict(required=True, help="ms, yyyy-MM-dd#HH:mm:ss:SSS, ISO, now, -1h")),
        (("-f", "--force"), dict(action="store_true", default=True))]),
    "updateSubGroup": (A.update_sub_group, "create or update a subscription group", [
        G, C, B, (("-s", "--consume-enable"), dict(type=_bool, default=None)),
        (("-m", "--from-min"), dict(type=_bool, default=None)), (("-d", "--broadcast"), dict(type=_bool, default=None)),
        (("-q", "--retry-queues"), dict(type=int, default=None)), (("-r", "--retry-max"), dict(type=int, default=None)),
        (("-i", "--broker-id"), dict(type=int, default=None))]),
    "deleteSubGroup": (A.delete_sub_group, "delete a subscription group (and its offsets)", [
        G, C, B, (("--keep-offsets",), dict(action="store_true", help="keep the group's committed offsets"))]),
    "statsAll": (A.stats_all, "every topic with its groups and accumulation", [
        T_OPT, (("-a", "--active"), dict(action="store_true", help="only groups with accumulation"))]),
    "queryMsgById": (M.query_by_id, "one message by offset msgId", [(("-i", "--msg-id"), dict(required=True)), T_OPT]),
    "queryMsgByKey": (M.query_by_key, "messages by KEYS", [
        T, (("-k", "--key"), dict(required=True)), BEGIN, END, (("--max",), dict(type=int, default=64))]),
    "queryMsgByUniqueKey": (M.query_by_unique_key, "one message by its UNIQ_KEY (client msgId)", [
        (("-i", "--msg-id"), dict(required=True)), T]),
    "queryMsgByOffset": (M.query_by_offset, "the message at a queue offset", [
        T, (("-b", "--broker"), dict(required=True, help="broker name")),
        (("-i", "--queue"), dict(type=int, required=True)), (("-o", "--offset"), dict(type=int, required=True))]),
    "sendMessage": (M.send_message, "send one message", [
        T, (("-p", "--body"), dict(required=True)), (("-k", "--keys"), dict(default=None)),
        (("-c", "--tags"), dict(default=None)), BNAME, QID]),
    "consumeMessage": (M.consume_message, "read messages (no offsets committed)", [
        T, BNAME, QID, (("-o", "--offset"), dict(type=int, default=None)), (("-s", "--begin"), dict(default=None)),
        END, (("-c", "--count"), dict(type=int, default=128)), (("-g", "--group"), dict(default=None))]),
    "printMsg": (M.print_msg, "every message of a topic in a time range", [
        T, BEGIN, END, (("-s", "--tags"), dict(default=None, help="tag expression (a||b)")),
        (("-c", "--charset"), dict(default="utf-8")), (("-d", "--print-body"), dict(type=_bool, default=True))]),
}


def _runner(fn):
    return guarded(lambda args: fn(args, Out(args.json)))


def add_parsers(sub) -> None:
    for name, (fn, help_text, options) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=f"{help_text} (as mqadmin {name})")
        for flags, kw in options:
            p.add_argument(*flags, **kw)
        p.add_argument("-n", "--namesrv", default="127.0.0.1:9876", help="NameServer address(es), ';'-separated")
        p.add_argument("--json", action="store_true", help="print JSON instead of a table")
        p.add_argument("--access-key", default=None, help="ACL account (brokers with aclEnable=true)")
        p.add_argument("--secret-key", default=None, help="ACL secret of --access-key")
        p.set_defaults(_run=_runner(fn))
