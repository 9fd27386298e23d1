"""Differential test: the same request sequences, good and bad, sent to shmq and to Apache
RocketMQ 4.9.7 with shmq's own protocol client; the response codes, the extFields names and
the body shapes must be equal, except the differences listed in KNOWN (each one is in
docs/compatibility.md with its reason).
"""
from __future__ import annotations

import pytest

from shmq.errors import RemotingClosed, RemotingTimeout
from shmq.protocol import RequestCode as R
from shmq.protocol.headers import SendMessageRequestHeader, send_header_to_v2

from .conftest import unique
from .differential import Recorder, encode_batch, now_ms

# ---- request builders -----------------------------------------------------------------------


def send_v2(topic: str, queue_id: int = 0, props: str = "", **over) -> dict:
    h = SendMessageRequestHeader(producerGroup="diff_pg", topic=topic, defaultTopic="TBW102",
                                 defaultTopicQueueNums=4, queueId=queue_id, sysFlag=0,
                                 bornTimestamp=now_ms(), flag=0, properties=props or None)
    ext = send_header_to_v2(h)
    ext.update(over)
    return {k: v for k, v in ext.items() if v is not None}


def pull_ext(topic: str, group: str, queue_id: int = 0, offset: int = 0, sub: str | None = "*",
             sysflag: int | None = None, **over) -> dict:
    ext = {"consumerGroup": group, "topic": topic, "queueId": queue_id, "queueOffset": offset,
           "maxMsgNums": 32, "sysFlag": sysflag if sysflag is not None else (4 if sub else 0),
           "commitOffset": 0, "suspendTimeoutMillis": 0, "subVersion": 0}
    if sub is not None:
        ext["subscription"] = sub
    ext.update(over)
    return {k: v for k, v in ext.items() if v is not None}


def _found(resp) -> bool:
    return resp is not None and resp.code == 0


def _ext_is(key: str, value: str):
    return lambda resp: resp is not None and resp.ext_fields.get(key) == value


# ---- cases: each runs one sequence on one target and returns its recorders -------------------


def case_namesrv_routes(t, n):
    ns = Recorder(t, "namesrv")
    ns("route of a topic", R.GET_ROUTEINFO_BY_TOPIC, {"topic": n["topic"]})
    ns("route of an unknown topic", R.GET_ROUTEINFO_BY_TOPIC, {"topic": n["missing"]})
    # another field present: RocketMQ checks required fields only when extFields is not empty
    ns("route without the topic field", R.GET_ROUTEINFO_BY_TOPIC, {"x": 1})
    ns("cluster info", R.GET_BROKER_CLUSTER_INFO)
    ns("topics by cluster", R.GET_TOPICS_BY_CLUSTER, {"cluster": t.cluster})
    ns("kv config not set", R.GET_KV_CONFIG, {"namespace": "ORDER_TOPIC_CONFIG", "key": n["missing"]})
    return [ns]


def case_namesrv_unknown_code(t, n):
    ns = Recorder(t, "namesrv")
    ns("unknown request code", 9876, timeout=2)
    return [ns]


def case_send(t, n):
    b = Recorder(t)
    b("send v2", R.SEND_MESSAGE_V2, send_v2(n["topic"], props="TAGS\x01a\x02KEYS\x01k1\x02"), b"hello")
    b("send v2 to queue 3", R.SEND_MESSAGE_V2, send_v2(n["topic"], 3), b"hello")
    b("send v2, queue id out of range", R.SEND_MESSAGE_V2, send_v2(n["topic"], 99), b"x")
    b("send v2, empty body", R.SEND_MESSAGE_V2, send_v2(n["topic"]), b"")
    b("send v2, no topic field", R.SEND_MESSAGE_V2, send_v2(n["topic"], b=None), b"x")
    b("send v2, queue id not a number", R.SEND_MESSAGE_V2, send_v2(n["topic"], e="zero"), b"x")
    b("send v2, illegal topic name", R.SEND_MESSAGE_V2, send_v2("bad topic!"), b"x")
    b("send v2, body over maxMessageSize", R.SEND_MESSAGE_V2, send_v2(n["topic"]), b"x" * (4 * 1024 * 1024 + 1))
    b("send to a system topic", R.SEND_MESSAGE_V2, send_v2("TBW102"), b"x")
    return [b]


def case_pull_and_offsets(t, n):
    b = Recorder(t)
    topic, group = n["topic"], n["group"]
    for i in range(3):
        b(f"send {i}", R.SEND_MESSAGE_V2, send_v2(topic, 0, props="TAGS\x01t%d\x02" % (i % 2)), b"m%d" % i)
    b("max offset", R.GET_MAX_OFFSET, {"topic": topic, "queueId": 0}, until=_ext_is("offset", "3"))
    b("min offset", R.GET_MIN_OFFSET, {"topic": topic, "queueId": 0})
    b("max offset, unknown queue", R.GET_MAX_OFFSET, {"topic": topic, "queueId": 77})
    b("earliest store time", R.GET_EARLIEST_MSG_STORETIME, {"topic": topic, "queueId": 0})
    b("pull from 0", R.PULL_MESSAGE, pull_ext(topic, group), until=_found)
    b("pull, tag filter", R.PULL_MESSAGE, pull_ext(topic, group, sub="t1"))
    b("pull at the end", R.PULL_MESSAGE, pull_ext(topic, group, offset=3))
    b("pull past the end", R.PULL_MESSAGE, pull_ext(topic, group, offset=50))
    b("pull, unknown topic", R.PULL_MESSAGE, pull_ext(n["missing"], group))
    b("pull, no group field", R.PULL_MESSAGE, pull_ext(topic, group, consumerGroup=None))
    b("query offset never committed", R.QUERY_CONSUMER_OFFSET,
      {"consumerGroup": group, "topic": topic, "queueId": 0})
    b("commit offset", R.UPDATE_CONSUMER_OFFSET,
      {"consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": 2})
    b("query offset after commit", R.QUERY_CONSUMER_OFFSET,
      {"consumerGroup": group, "topic": topic, "queueId": 0})
    b("search offset by time", R.SEARCH_OFFSET_BY_TIMESTAMP,
      {"topic": topic, "queueId": 0, "timestamp": now_ms() + 60_000})
    return [b]


def case_queries(t, n):
    b = Recorder(t)
    topic = n["topic"]
    b("send with key", R.SEND_MESSAGE_V2, send_v2(topic, 0, props="KEYS\x01kq\x02"), b"q")
    b("query by key", R.QUERY_MESSAGE,
      {"topic": topic, "key": "kq", "maxNum": 8, "beginTimestamp": 0, "endTimestamp": now_ms() + 60_000},
      until=_found)
    b("query by unknown key", R.QUERY_MESSAGE,
      {"topic": topic, "key": "nope", "maxNum": 8, "beginTimestamp": 0, "endTimestamp": now_ms() + 60_000})
    b("view message at a bad offset", R.VIEW_MESSAGE_BY_ID, {"offset": 1 << 40})
    return [b]


def case_clients(t, n):
    b = Recorder(t)
    hb = ('{"clientID":"127.0.0.1@diff","consumerDataSet":[{"groupName":"%s","consumeType":"CONSUME_PASSIVELY",'
          '"messageModel":"CLUSTERING","consumeFromWhere":"CONSUME_FROM_LAST_OFFSET","unitMode":false,'
          '"subscriptionDataSet":[{"classFilterMode":false,"topic":"%s","subString":"*","tagsSet":[],'
          '"codeSet":[],"subVersion":1,"expressionType":"TAG"}]}],"producerDataSet":[]}'
          % (n["group"], n["topic"])).encode()
    b("heartbeat", R.HEART_BEAT, body=hb)
    b("heartbeat, body not JSON", R.HEART_BEAT, body=b"{nope")
    b("consumers of the group", R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": n["group"]})
    b("consumers of an unknown group", R.GET_CONSUMER_LIST_BY_GROUP, {"consumerGroup": n["missing"]})
    b("unregister", R.UNREGISTER_CLIENT, {"clientID": "127.0.0.1@diff", "consumerGroup": n["group"]})
    return [b]


def case_admin(t, n):
    b = Recorder(t)
    b("commit offset", R.UPDATE_CONSUMER_OFFSET,  # so that the offset table is not empty
      {"consumerGroup": n["group"], "topic": n["topic"], "queueId": 0, "commitOffset": 0})
    b("runtime info", R.GET_BROKER_RUNTIME_INFO)
    b("all topic config", R.GET_ALL_TOPIC_CONFIG)
    b("all consumer offsets", R.GET_ALL_CONSUMER_OFFSET)
    b("all delay offsets", R.GET_ALL_DELAY_OFFSET)
    b("all subscription groups", R.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
    b("create topic, no topic field", R.UPDATE_AND_CREATE_TOPIC,
      {"defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicFilterType": "SINGLE_TAG"})
    b("create topic named like the cluster", R.UPDATE_AND_CREATE_TOPIC,
      {"topic": t.cluster, "defaultTopic": "TBW102", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
       "topicFilterType": "SINGLE_TAG"})
    b("unknown request code", 9876)
    return [b]


def case_transactions(t, n):
    b = Recorder(t)
    b("end transaction of an unknown message", R.END_TRANSACTION,
      {"producerGroup": "diff_pg", "tranStateTableOffset": 0, "commitLogOffset": 1 << 40,
       "commitOrRollback": 8, "fromTransactionCheck": False, "msgId": "00", "transactionId": "x"}, timeout=2)
    return [b]


def case_consumer_extras(t, n):
    b = Recorder(t)
    topic, group = n["topic"], n["group"]
    r = b("send", R.SEND_MESSAGE_V2, send_v2(topic, 1, props="TAGS\x01a\x02a\x015\x02"), b"x")
    b("send v1 (long header names)", R.SEND_MESSAGE,
      {"producerGroup": "diff_pg", "topic": topic, "defaultTopic": "TBW102", "defaultTopicQueueNums": 4,
       "queueId": 1, "sysFlag": 0, "bornTimestamp": now_ms(), "flag": 0}, b"v1")
    batch = encode_batch([(b"b1", b"", 0), (b"b2", b"", 0)])
    b("send batch", R.SEND_BATCH_MESSAGE, send_v2(topic, 1, m="true"), batch)
    b("pull with SQL92", R.PULL_MESSAGE, pull_ext(topic, group, 1, sub="a > 3", expressionType="SQL92"),
      until=_found)
    b("pull with a bad SQL92 expression", R.PULL_MESSAGE,
      pull_ext(topic, group, 1, sub="a > AND", expressionType="SQL92"))
    b("check client config, good SQL92", R.CHECK_CLIENT_CONFIG, body=(
        '{"clientId":"127.0.0.1@diff","group":"%s","subscriptionData":{"classFilterMode":false,"topic":"%s",'
        '"subString":"a > 3","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"SQL92"}}'
        % (group, topic)).encode())
    b("check client config, bad SQL92", R.CHECK_CLIENT_CONFIG, body=(
        '{"clientId":"127.0.0.1@diff","group":"%s","subscriptionData":{"classFilterMode":false,"topic":"%s",'
        '"subString":"a >","tagsSet":[],"codeSet":[],"subVersion":1,"expressionType":"SQL92"}}'
        % (group, topic)).encode())
    mq = '{"brokerName":"%s","queueId":1,"topic":"%s"}' % (t.broker_name, topic)
    lock = ('{"clientId":"127.0.0.1@diff","consumerGroup":"%s","mqSet":[%s]}' % (group, mq)).encode()
    b("lock a queue", R.LOCK_BATCH_MQ, body=lock)
    b("lock body not JSON", R.LOCK_BATCH_MQ, body=b"[")
    b("unlock the queue", R.UNLOCK_BATCH_MQ, body=lock)
    if r is not None and r.code == 0:
        phys = int(r.ext_fields["msgId"][-16:], 16)
        b("send back for a retry", R.CONSUMER_SEND_MSG_BACK,
          {"offset": phys, "group": group, "delayLevel": 0, "originMsgId": r.ext_fields["msgId"],
           "originTopic": topic, "maxReconsumeTimes": 16})
    b("send back, unknown offset", R.CONSUMER_SEND_MSG_BACK,
      {"offset": 1 << 40, "group": group, "delayLevel": 0, "maxReconsumeTimes": 16})
    return [b]


def case_admin_tools(t, n):
    """What mqadmin and the dashboards ask a broker (issue 11 part A implements them in shmq:
    until then shmq answers 3, which PENDING allows)."""
    b = Recorder(t)
    topic, group = n["topic"], n["group"]
    b("send", R.SEND_MESSAGE_V2, send_v2(topic, 0), b"x")
    b("commit offset", R.UPDATE_CONSUMER_OFFSET,
      {"consumerGroup": group, "topic": topic, "queueId": 0, "commitOffset": 1})
    b("topic stats", R.GET_TOPIC_STATS_INFO, {"topic": topic})
    b("topic stats, unknown topic", R.GET_TOPIC_STATS_INFO, {"topic": n["missing"]})
    b("consume stats", R.GET_CONSUME_STATS, {"consumerGroup": group, "topic": topic})
    b("consume stats, unknown group", R.GET_CONSUME_STATS, {"consumerGroup": n["missing"], "topic": topic})
    b("consumer connections, none online", R.GET_CONSUMER_CONNECTION_LIST, {"consumerGroup": group})
    b("producer connections, none online", R.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "diff_pg"})
    b("who consumes the topic", R.QUERY_TOPIC_CONSUME_BY_WHO, {"topic": topic})
    sub = ('{"brokerId":0,"consumeBroadcastEnable":true,"consumeEnable":true,"consumeFromMinEnable":true,'
           '"groupName":"%s","notifyConsumerIdsChangedEnable":true,"retryMaxTimes":16,"retryQueueNums":1,'
           '"whichBrokerWhenConsumeSlowly":1}' % n["group"]).encode()
    b("create subscription group", R.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body=sub)
    b("delete subscription group", R.DELETE_SUBSCRIPTIONGROUP, {"groupName": n["group"]})
    b("broker stats data, unknown name", R.VIEW_BROKER_STATS_DATA, {"statsName": "nope", "statsKey": topic})
    b("clean expired consume queues", R.CLEAN_EXPIRED_CONSUMEQUEUE)
    return [b]


def case_raw_frames(t, n):
    """Frames that are not commands: what a client sees is the connection's fate."""
    out = Recorder(t)
    for label, data in (("header length past the frame", b"\x00\x00\x00\x08\x00\x00\x10\x00abcd"),
                        ("JSON header not JSON", b"\x00\x00\x00\x09\x00\x00\x00\x05{nope"),
                        ("frame length over 16 MiB", b"\x7f\x00\x00\x00\x00\x00\x00\x02{}")):
        with t.client() as c:
            c.send_raw(data)
            try:
                resp = c.receive(3.0)
                fate = {"code": resp.code}
            except RemotingClosed:
                fate = {"closed": True}
            except RemotingTimeout:
                fate = {"answer": "none"}
        out.seen.append((label, fate))
    return [out]


CASES = {f.__name__[5:]: f for f in (case_namesrv_routes, case_namesrv_unknown_code, case_send,
                                     case_pull_and_offsets, case_queries, case_clients, case_admin,
                                     case_transactions, case_consumer_extras, case_admin_tools,
                                     case_raw_frames)}

#: (case, label) -> the reason the answers differ; docs/compatibility.md lists each
KNOWN: dict[tuple[str, str], str] = {
    ("namesrv_unknown_code", "unknown request code"):
        "shmq's NameServer answers REQUEST_CODE_NOT_SUPPORTED, RocketMQ's stays silent (issue 11 part A)",
    ("admin", "runtime info"):
        "GET_BROKER_RUNTIME_INFO keys: shmq has fewer statistics (issue 11 part A adds the ones clusterList reads)",
    # the tables hold what earlier tests left on each broker (the Apache pair is shared by the
    # whole run, shmq's by one worker): their entries differ, so their shapes cannot be compared
    ("admin", "all consumer offsets"): "table contents depend on the tests that ran before",
    ("admin", "all delay offsets"): "table contents depend on the tests that ran before",
    ("admin", "all subscription groups"):
        "shmq keeps no subscription-group configs: RocketMQ has built-in ones and creates one per consuming group",
    ("consumer_extras", "pull with a bad SQL92 expression"):
        "RocketMQ delivers unfiltered messages when a pull's SQL92 does not compile; shmq answers 23",
}
#: a send refused before the put: RocketMQ's answer carries MSG_REGION / TRACE_ON, shmq's does
#: not; a client reads them only from a successful answer
for _label in ("queue id out of range", "no topic field", "illegal topic name", "body over maxMessageSize"):
    KNOWN[("send", f"send v2, {_label}")] = "error answers of a send carry no MSG_REGION / TRACE_ON"


#: cases whose requests shmq does not serve yet (issue 11 part A): a difference is allowed only
#: while shmq answers REQUEST_CODE_NOT_SUPPORTED; once it serves the code, the answers must agree
PENDING = {"admin_tools"}


def _allowed(name: str, label: str, mine: dict) -> bool:
    return (name, label) in KNOWN or (name in PENDING and mine.get("code") == 3)


def run_case(name: str, t, names: dict) -> list[tuple[str, dict]]:
    recs = CASES[name](t, names)
    try:
        return [obs for r in recs for obs in r.seen]
    finally:
        for r in recs:
            r.close()


@pytest.mark.parametrize("name", list(CASES))
def test_same_answers(name, shmq_target, apache):
    names = {"topic": unique("Diff"), "group": unique("diff_cg"), "missing": unique("Missing")}
    for t in (shmq_target, apache):
        t.create_topic(names["topic"], queues=4)
    ours = run_case(name, shmq_target, names)
    theirs = run_case(name, apache, names)
    diffs = []
    for (label, mine), (_, ref) in zip(ours, theirs):
        if mine != ref and not _allowed(name, label, mine):
            diffs.append(f"{label}:\n    shmq:   {mine}\n    apache: {ref}")
    assert not diffs, f"{name}: {len(diffs)} answers differ from Apache RocketMQ's:\n" + "\n".join(diffs)
