"""shmq-broker over the wire with 2 workers: send, pull (status table), offsets, long polling,
concurrency on one connection, topics, client registry, queries."""
from __future__ import annotations

from shmq.protocol import attach

import json
import time

import pytest

from shmq.errors import RemotingTimeout
from shmq.message.batch import BatchEntry, encode_batch
from shmq.message.record import decode_record, iter_records
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import KVTable, decode_json
from shmq.protocol.headers import SendMessageRequestHeader, send_header_to_v2

from .broker_helpers import clients_on_two_workers, create_topic, pull, send, start_broker  # noqa: F401
from .conftest import namesrv, processes, start_namesrv  # noqa: F401


@pytest.fixture
def broker(start_broker):
    return start_broker()


_open: list[SyncRemotingClient] = []


@pytest.fixture(autouse=True)
def _close_clients():
    yield
    while _open:
        _open.pop().close()


def clients(broker, n=2):
    cs = [SyncRemotingClient(broker.addr, timeout=5) for _ in range(n)]
    _open.extend(cs)
    return cs


def test_send_then_pull_every_status(broker):
    c, d = clients(broker)
    assert create_topic(c, "T1", queues=2).code == 0
    r = send(c, "T1", b"hello", queue_id=1, tags="TagA", keys="k1 k2")
    assert r.code == 0, r.remark
    e = r.ext_fields
    assert e["queueId"] == "1" and e["queueOffset"] == "0" and len(e["msgId"]) == 32
    assert e["MSG_REGION"] == "DefaultRegion" and e["TRACE_ON"] == "true"
    r2 = send(d, "T1", b"world", queue_id=1, tags="TagB", v2=False, props="WAIT\x01true\x02")
    assert r2.code == 0 and r2.ext_fields["queueOffset"] == "1"
    # FOUND: both records, bornHost = the peer, storeHost = the broker, CLUSTER added.
    p = pull(d, "T1", 1, 0)
    assert p.code == 0 and p.remark == "FOUND"
    assert p.ext_fields == {"suggestWhichBrokerId": "0", "nextBeginOffset": "2", "minOffset": "0", "maxOffset": "2"}
    msgs = list(iter_records(p.body))
    assert [bytes(m.body) for m in msgs] == [b"hello", b"world"]
    assert msgs[0].properties["TAGS"] == "TagA" and msgs[0].properties["CLUSTER"] == "DefaultCluster"
    assert msgs[1].properties == {"TAGS": "TagB", "CLUSTER": "DefaultCluster"}  # WAIT is not stored
    assert msgs[0].store_host == ("127.0.0.1", broker.port)
    assert msgs[0].born_host[0] == "127.0.0.1" and msgs[0].born_host[1] == c.sock.getsockname()[1]
    assert msgs[0].offset_msg_id == e["msgId"]
    # tag filter: NO_MATCHED_MESSAGE -> 20, next offset past the scanned entries
    p = pull(d, "T1", 1, 0, sub="TagC")
    assert (p.code, p.remark, p.ext_fields["nextBeginOffset"]) == (20, "NO_MATCHED_MESSAGE", "2")
    p = pull(d, "T1", 1, 0, sub="TagB || TagC")
    assert p.code == 0 and [bytes(m.body) for m in iter_records(p.body)] == [b"world"]
    # OFFSET_OVERFLOW_ONE -> 19, OVERFLOW_BADLY -> 21, empty queue: 19 at 0 and 21 elsewhere
    p = pull(d, "T1", 1, 2)
    assert (p.code, p.remark, p.ext_fields["nextBeginOffset"]) == (19, "OFFSET_OVERFLOW_ONE", "2")
    p = pull(d, "T1", 1, 7)
    assert (p.code, p.remark, p.ext_fields["nextBeginOffset"]) == (21, "OFFSET_OVERFLOW_BADLY", "2")
    p = pull(d, "T1", 0, 0)
    assert p.code == 19 and set(p.ext_fields) == {"suggestWhichBrokerId", "nextBeginOffset", "minOffset", "maxOffset"}
    p = pull(d, "T1", 0, 5)
    assert p.code == 21 and p.ext_fields["nextBeginOffset"] == "0"
    # unknown topic and queue id out of range
    assert pull(d, "Nope", 0, 0).code == 17
    assert pull(d, "T1", 2, 0).code == 1


def test_offsets_and_times(broker):
    c, d = clients(broker)
    create_topic(c, "T2", queues=1)
    t0 = int(time.time() * 1000)
    for i in range(5):
        assert send(c, "T2", b"m%d" % i).code == 0
    # a new group on a young queue starts at 0 (QUERY_CONSUMER_OFFSET answers 0, not 22)
    q = d.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g", topic="T2", queueId=0))
    assert q.code == 0 and q.ext_fields["offset"] == "0"
    assert c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="g", topic="T2", queueId=0,
                            commitOffset=3)).code == 0
    # committed on one connection (maybe one worker), read on another: shared offset table
    q = d.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g", topic="T2", queueId=0))
    assert q.ext_fields["offset"] == "3"
    assert d.invoke(request(RequestCode.GET_MAX_OFFSET, topic="T2", queueId=0)).ext_fields["offset"] == "5"
    assert d.invoke(request(RequestCode.GET_MIN_OFFSET, topic="T2", queueId=0)).ext_fields["offset"] == "0"
    ts = int(d.invoke(request(RequestCode.GET_EARLIEST_MSG_STORETIME, topic="T2", queueId=0)).ext_fields["timestamp"])
    assert t0 - 1000 <= ts <= int(time.time() * 1000)
    r = d.invoke(request(RequestCode.SEARCH_OFFSET_BY_TIMESTAMP, topic="T2", queueId=0, timestamp=ts + 60_000))
    assert r.ext_fields["offset"] == "5"
    # the commit-offset flag of a pull commits too
    from shmq.protocol.headers import PullMessageRequestHeader
    h = PullMessageRequestHeader(consumerGroup="g", topic="T2", queueId=0, queueOffset=4, maxMsgNums=32,
                                 sysFlag=1 | 4, commitOffset=4, suspendTimeoutMillis=0, subVersion=0, subscription="*")
    assert d.invoke(request(RequestCode.PULL_MESSAGE, h)).code == 0
    q = c.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="g", topic="T2", queueId=0))
    assert q.ext_fields["offset"] == "4"


def test_long_poll_held_then_answered_by_a_send_on_another_worker(broker):
    c, d = clients_on_two_workers(broker.addr)
    _open.extend((c, d))
    create_topic(c, "LP", queues=1)
    h_pull = pull  # the held pull goes out raw, so the test can look at it while it is parked
    from shmq.protocol.headers import PullMessageRequestHeader
    h = PullMessageRequestHeader(consumerGroup="g", topic="LP", queueId=0, queueOffset=0, maxMsgNums=32,
                                 sysFlag=2 | 4, commitOffset=0, suspendTimeoutMillis=20_000, subVersion=0,
                                 subscription="*")
    cmd = request(RequestCode.PULL_MESSAGE, h)
    cmd.opaque = 77
    d.send(cmd)
    with pytest.raises(RemotingTimeout):
        d.receive(0.7)  # held: no answer while the queue is empty
    # the same connection is still served while its pull is parked
    r = d.invoke(request(RequestCode.GET_MAX_OFFSET, topic="LP", queueId=0))
    assert r.code == 0 and r.ext_fields["offset"] == "0"
    assert send(c, "LP", b"wake").code == 0
    resp = d.receive(10)
    assert resp.opaque == 77 and resp.code == 0
    assert [bytes(m.body) for m in iter_records(resp.body)] == [b"wake"]
    del h_pull


def test_long_poll_times_out_with_pull_not_found(broker):
    (c,) = clients(broker, 1)
    create_topic(c, "LP2", queues=1)
    t = time.monotonic()
    r = pull(c, "LP2", 0, 0, suspend_ms=600, timeout=10)
    assert r.code == 19 and time.monotonic() - t >= 0.55
    assert r.ext_fields["nextBeginOffset"] == "0"


def test_batch_send(broker):
    c, d = clients(broker)
    create_topic(c, "B1", queues=1)
    entries = [BatchEntry(body=b"b%d" % i, properties=f"KEYS\x01key{i}\x02UNIQ_KEY\x01U{i}", flag=0)
               for i in range(32)]
    h = SendMessageRequestHeader(producerGroup="pg", topic="B1", defaultTopic="TBW102", defaultTopicQueueNums=4,
                                 queueId=0, sysFlag=0, bornTimestamp=int(time.time() * 1000), flag=0,
                                 properties="WAIT\x01true", batch=True)
    r = c.invoke(request(RequestCode.SEND_BATCH_MESSAGE, send_header_to_v2(h), encode_batch(entries)))
    assert r.code == 0, r.remark
    ids = r.ext_fields["msgId"].split(",")
    assert len(ids) == 32 and r.ext_fields["queueOffset"] == "0"
    p = pull(d, "B1", 0, 0)
    msgs = list(iter_records(p.body))
    assert [bytes(m.body) for m in msgs] == [b"b%d" % i for i in range(32)]
    assert [m.offset_msg_id for m in msgs] == ids
    assert msgs[5].properties["KEYS"] == "key5" and msgs[5].properties["CLUSTER"] == "DefaultCluster"
    assert "WAIT" not in msgs[5].properties
    # view by id and query by key
    v = d.invoke(request(RequestCode.VIEW_MESSAGE_BY_ID, offset=msgs[3].phys_offset))
    assert v.code == 0 and bytes(decode_record(v.body).body) == b"b3"
    assert d.invoke(request(RequestCode.VIEW_MESSAGE_BY_ID, offset=123456789)).code == 1
    deadline = time.monotonic() + 5
    while True:  # the index is built by the supervisor a moment after the append
        q = d.invoke(request(RequestCode.QUERY_MESSAGE, topic="B1", key="key7", maxNum=32, beginTimestamp=0,
                             endTimestamp=2**62))
        if q.code == 0 or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert q.code == 0 and [bytes(m.body) for m in iter_records(q.body)] == [b"b7"]


def test_auto_create_through_tbw102_and_perms(broker):
    c, d = clients(broker)
    r = send(c, "AutoT", b"x", queue_id=3)
    assert r.code == 0, r.remark
    # the worker that did not create it knows it too (asks the supervisor on a miss)
    assert pull(d, "AutoT", 3, 0).code == 0
    tops = decode_json(d.invoke(request(RequestCode.GET_ALL_TOPIC_CONFIG)).body, dict)
    t = tops["topicConfigTable"]["AutoT"]
    assert (t["readQueueNums"], t["writeQueueNums"], t["perm"]) == (4, 4, 6)
    # without a default topic an unknown topic is 17
    assert send(c, "NoAuto", b"x", default_topic="").code == 17
    # write-only and read-only topics
    create_topic(c, "RO", queues=1, perm=4)
    assert send(c, "RO", b"x").code == 0  # RocketMQ 4.9.8 checks no topic permission on a send
    create_topic(c, "WO", queues=1, perm=2)
    assert send(c, "WO", b"x").code == 0
    assert pull(d, "WO", 0, 0).code == 16
    # delete: gone everywhere
    assert c.invoke(request(RequestCode.DELETE_TOPIC_IN_BROKER, topic="WO")).code == 0
    assert send(d, "WO", b"x", default_topic="").code == 17


def test_heartbeat_consumer_list_locks_and_runtime(broker):
    c, d = clients(broker)
    hb = {"clientID": "127.0.0.1@c1", "producerDataSet": [{"groupName": "pg1"}],
          "consumerDataSet": [{"groupName": "cg1", "consumeType": "CONSUME_PASSIVELY", "messageModel": "CLUSTERING",
                               "consumeFromWhere": "CONSUME_FROM_FIRST_OFFSET",
                               "subscriptionDataSet": [{"topic": "HT", "subString": "a || b", "tagsSet": ["a", "b"],
                                                        "codeSet": [0, 0], "subVersion": 5}]}]}
    assert c.invoke(request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())).code == 0
    hb2 = dict(hb, clientID="127.0.0.1@c2")
    assert d.invoke(request(RequestCode.HEART_BEAT, body=json.dumps(hb2).encode())).code == 0
    r = c.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="cg1"))
    assert sorted(json.loads(r.body)["consumerIdList"]) == ["127.0.0.1@c1", "127.0.0.1@c2"]
    r = c.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="nobody"))
    assert r.code == 1 and r.remark == "no consumer for this group, nobody"
    # %RETRY%cg1 exists after the heartbeat
    tops = decode_json(d.invoke(request(RequestCode.GET_ALL_TOPIC_CONFIG)).body, dict)["topicConfigTable"]
    assert tops["%RETRY%cg1"]["readQueueNums"] == 1
    # the heartbeat subscription filters pulls without the subscription flag; older subVersion -> 25
    create_topic(c, "HT", queues=1)
    send(c, "HT", b"1", tags="a")
    send(c, "HT", b"2", tags="z")
    r = pull(d, "HT", 0, 0, group="cg1", sub=None)
    assert r.code == 0 and [bytes(m.body) for m in iter_records(r.body)] == [b"1"]
    assert pull(d, "HT", 0, 0, group="nogroup", sub=None).code == 24
    from shmq.protocol.headers import PullMessageRequestHeader
    h = PullMessageRequestHeader(consumerGroup="cg1", topic="HT", queueId=0, queueOffset=0, maxMsgNums=32,
                                 sysFlag=0, commitOffset=0, suspendTimeoutMillis=0, subVersion=99)
    assert d.invoke(request(RequestCode.PULL_MESSAGE, h)).code == 25
    # locks: first come first served, renewals and unlocks by the holder only
    mq = [{"topic": "HT", "brokerName": "b", "queueId": 0}, {"topic": "HT", "brokerName": "b", "queueId": 1}]
    lock = lambda cl, cid, m: json.loads(cl.invoke(request(RequestCode.LOCK_BATCH_MQ, body=json.dumps(
        {"consumerGroup": "cg1", "clientId": cid, "mqSet": m}).encode())).body)["lockOKMQSet"]
    assert len(lock(c, "c1", mq)) == 2
    assert lock(d, "c2", mq) == []
    assert c.invoke(request(RequestCode.UNLOCK_BATCH_MQ, body=json.dumps(
        {"consumerGroup": "cg1", "clientId": "c1", "mqSet": mq[:1]}).encode())).code == 0
    assert [m["queueId"] for m in lock(d, "c2", mq)] == [0]
    # unregister drops the client
    assert c.invoke(request(RequestCode.UNREGISTER_CLIENT, clientID="127.0.0.1@c1", consumerGroup="cg1")).code == 0
    r = d.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="cg1"))
    assert json.loads(r.body)["consumerIdList"] == ["127.0.0.1@c2"]
    # CHECK_CLIENT_CONFIG: tags fine, SQL92 refused as by a broker without property filtering
    cc = lambda t: c.invoke(request(RequestCode.CHECK_CLIENT_CONFIG, body=json.dumps(
        {"clientId": "c1", "group": "cg1", "subscriptionData": {"topic": "HT", "subString": "a > 1",
                                                                "expressionType": t}}).encode())).code
    assert (cc("TAG"), cc("SQL92")) == (0, 1)
    # runtime info and attach info
    info = decode_json(c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).body, KVTable).table
    assert info["brokerVersion"] == "409" and int(info["commitLogMaxOffset"]) > 0
    ch = c.invoke(request(9900)).ext_fields  # a challenge first (test_security_attach.py)
    proof = attach.proof(attach.read_key(ch["keyFile"]), ch["challenge"])
    a = c.invoke(request(9900, challenge=ch["challenge"], proof=proof))
    assert a.code == 0 and a.ext_fields["storeRoot"] == broker.store and int(a.ext_fields["generation"]) >= 1


def test_connection_close_notifies_the_rest_of_the_group(broker):
    a, b = clients_on_two_workers(broker.addr)  # members on different workers
    _open.extend((a, b))
    hb = lambda cid: json.dumps({"clientID": cid, "consumerDataSet": [
        {"groupName": "ng", "subscriptionDataSet": [{"topic": "NT", "subString": "*"}]}]}).encode()
    assert a.invoke(request(RequestCode.HEART_BEAT, body=hb("ca"))).code == 0
    # b joins: both members are told, each on its own connection (they may sit on different workers)
    assert b.invoke(request(RequestCode.HEART_BEAT, body=hb("cb"))).code == 0
    n = a.receive(5)
    assert n.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED and n.ext_fields["consumerGroup"] == "ng"
    try:  # drain the notifications of the two joins (b's may have come before its own answer)
        while True:
            a.receive(0.3)
    except RemotingTimeout:
        pass
    b.close()  # a connection that closes leaves the group at once
    n = a.receive(5)
    assert n.code == RequestCode.NOTIFY_CONSUMER_IDS_CHANGED
    r = a.invoke(request(RequestCode.GET_CONSUMER_LIST_BY_GROUP, consumerGroup="ng"))
    assert json.loads(r.body)["consumerIdList"] == ["ca"]


def test_vip_port_and_registration(start_namesrv, start_broker):
    ns = start_namesrv()
    br = start_broker(namesrv=ns)
    with SyncRemotingClient(f"127.0.0.1:{br.vip_port}") as c:
        assert create_topic(c, "VipT", queues=2).code == 0
        assert send(c, "VipT", b"v").code == 0
    with SyncRemotingClient(ns.addr) as n:
        deadline = time.monotonic() + 5
        while True:
            r = n.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="VipT"))
            if r.code == 0 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert r.code == 0 and br.addr.encode() in r.body
    br.stop()
    with SyncRemotingClient(ns.addr) as n:  # unregistered at shutdown
        assert n.invoke(request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="VipT")).code == 17


def test_reset_offset_by_time_tells_the_group(broker):
    from shmq.protocol.bodies import decode_reset_offset_body
    a, b = clients_on_two_workers(broker.addr)
    _open.extend((a, b))
    create_topic(a, "RS", queues=2)
    for i in range(4):
        assert send(a, "RS", b"%d" % i, queue_id=i % 2).code == 0
    for q in range(2):
        a.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="rsg", topic="RS", queueId=q, commitOffset=2))
    reset = lambda: a.invoke(request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, topic="RS", group="rsg",
                                     timestamp=0, isForce="true"))
    r = reset()  # nobody online: 206, and nothing moved (mqadmin then commits them itself)
    assert r.code == 206
    q = a.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="rsg", topic="RS", queueId=1))
    assert q.ext_fields["offset"] == "2"
    hb = json.dumps({"clientID": "cb", "consumerDataSet": [
        {"groupName": "rsg", "subscriptionDataSet": [{"topic": "RS", "subString": "*"}]}]}).encode()
    assert b.invoke(request(RequestCode.HEART_BEAT, body=hb)).code == 0
    for q in range(2):
        a.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="rsg", topic="RS", queueId=q, commitOffset=2))
    r = reset()
    assert r.code == 0, r.remark
    assert decode_reset_offset_body(r.body) == {("RS", broker_name_of(a), 0): 0, ("RS", broker_name_of(a), 1): 0}
    # RocketMQ's Broker2Client.resetOffset writes no offset: the consumers commit when told
    q = a.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="rsg", topic="RS", queueId=1))
    assert q.ext_fields["offset"] == "2"
    while True:  # the member (on the other worker) is told on its own connection
        n = b.receive(5)
        if n.code == RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
            break
    assert n.ext_fields["group"] == "rsg" and decode_reset_offset_body(n.body) == decode_reset_offset_body(r.body)
    # a C++ caller's consumers get ResetOffsetBodyForC: a list, no MessageQueue keys
    cpp = request(RequestCode.INVOKE_BROKER_TO_RESET_OFFSET, topic="RS", group="rsg", timestamp=0, isForce="true")
    cpp.language = "CPP"
    assert a.invoke(cpp).code == 0
    while (n := b.receive(5)).code != RequestCode.RESET_CONSUMER_CLIENT_OFFSET:
        pass
    rows = json.loads(n.body)["offsetTable"]
    assert sorted((x["queueId"], x["offset"], x["topic"]) for x in rows) == [(0, 0, "RS"), (1, 0, "RS")]


def broker_name_of(c) -> str:
    info = decode_json(c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).body, KVTable).table
    return info["brokerName"]


def test_held_pulls_past_the_connection_limit_are_all_answered(start_broker):
    # serverMaxInflightRequests=2: two held pulls are answered straight from their wake-up, the
    # other two wait as transport tasks (counted in flight); every one gets its message, and a
    # connection that closes with pulls held leaves nothing behind that answers it
    broker = start_broker(workers=1, settings={"serverMaxInflightRequests": 2})
    c, d, gone = clients(broker, 3)
    create_topic(c, "LPX", queues=4)
    from shmq.protocol.headers import PullMessageRequestHeader

    def held(conn, q, opaque):
        h = PullMessageRequestHeader(consumerGroup="g", topic="LPX", queueId=q, queueOffset=0, maxMsgNums=32,
                                     sysFlag=2 | 4, commitOffset=0, suspendTimeoutMillis=20_000, subVersion=0,
                                     subscription="*")
        cmd = request(RequestCode.PULL_MESSAGE, h)
        cmd.opaque = opaque
        conn.send(cmd)
    for q in range(4):
        held(gone, q, 200 + q)
    time.sleep(0.3)
    gone.close()
    for q in range(4):
        held(d, q, 100 + q)
    with pytest.raises(RemotingTimeout):
        d.receive(0.5)  # all four parked
    for q in range(4):
        assert send(c, "LPX", f"m{q}".encode(), queue_id=q).code == 0
    got = {}
    while len(got) < 4:
        r = d.receive(10)
        got[r.opaque] = [bytes(m.body) for m in iter_records(r.body)]
    assert got == {100 + q: [f"m{q}".encode()] for q in range(4)}
    # the broker still serves both connections
    assert send(c, "LPX", b"after", queue_id=0).code == 0
    assert pull(d, "LPX", 0, 1).code == 0
