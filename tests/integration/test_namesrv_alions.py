"""A third-party RocketMQ 4.x client (ali-ons, from npm) asks shmq-namesrv for routes.

ali-ons sends version 121 and language JAVA, so it gets the pre-4.9.4 body with bare broker-id
keys, and parses it with its own ``JSON2`` (eval-based) parser, as it does against RocketMQ.
"""
from __future__ import annotations

import pytest

from shmq.message.layout import masked_crc32
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper, encode_register_body
from shmq.protocol.headers import RegisterBrokerRequestHeader

from .conftest import run_ons_client as ons


@pytest.fixture
def registered(namesrv):
    """Two masters and a slave, registered over persistent connections as brokers do."""
    clients = []
    for name, addr, bid, topics in [
        ("broker-a", "127.0.0.1:10911", 0, {"TopicTest": 4, "Orders": 8}),
        ("broker-a", "127.0.0.1:10931", 1, {"TopicTest": 4, "Orders": 8}),
        ("broker-b", "127.0.0.1:10921", 0, {"TopicTest": 2}),
    ]:
        body = encode_register_body(RegisterBrokerBody(topicConfigSerializeWrapper=TopicConfigSerializeWrapper(
            topicConfigTable={t: TopicConfig(topicName=t, readQueueNums=q, writeQueueNums=q) for t, q in topics.items()})),
            compressed=True)
        h = RegisterBrokerRequestHeader(brokerName=name, brokerAddr=addr, clusterName="DefaultCluster",
                                        haServerAddr="", brokerId=bid, compressed=True, bodyCrc32=masked_crc32(body))
        c = SyncRemotingClient(namesrv.addr)
        assert c.invoke(request(RequestCode.REGISTER_BROKER, h, body)).code == 0
        clients.append(c)
    yield namesrv
    for c in clients:
        c.close()


def test_ali_ons_reads_the_route_rocketmq_would_give(registered):
    ev = ons("route", "--namesrv", registered.addr, "--topic", "TopicTest")
    assert ev[-1] == {"event": "done"}
    r = ev[0]
    assert r["ok"] is True and r["version"] == 121 and r["language"] == "JAVA"
    # Exactly a 4.9.8 NameServer's bytes for a version-121 client: bare Long keys.
    assert r["raw"] == (
        '{"brokerDatas":['
        '{"brokerAddrs":{0:"127.0.0.1:10911",1:"127.0.0.1:10931"},"brokerName":"broker-a","cluster":"DefaultCluster"},'
        '{"brokerAddrs":{0:"127.0.0.1:10921"},"brokerName":"broker-b","cluster":"DefaultCluster"}],'
        '"filterServerTable":{},"queueDatas":['
        '{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4},'
        '{"brokerName":"broker-b","perm":6,"readQueueNums":2,"topicSysFlag":0,"writeQueueNums":2}]}'
    )
    # And ali-ons' own parser understood it (keys come back as strings from a JS object).
    route = r["route"]
    assert [b["brokerAddrs"] for b in route["brokerDatas"]] == [
        {"0": "127.0.0.1:10911", "1": "127.0.0.1:10931"}, {"0": "127.0.0.1:10921"}]
    assert [(q["brokerName"], q["writeQueueNums"], q["perm"]) for q in route["queueDatas"]] == [
        ("broker-a", 4, 6), ("broker-b", 2, 6)]


def test_ali_ons_gets_topic_not_exist(registered):
    ev = ons("route", "--namesrv", registered.addr, "--topic", "NoSuchTopic")
    assert ev[0]["ok"] is False and ev[0]["code"] == 17
    assert ev[0]["message"].startswith("No topic route info in name server for the topic: NoSuchTopic")


def test_ali_ons_produces_through_shmq_remoting_to_a_stand_in_broker(namesrv):
    """ali-ons finds a broker through shmq-namesrv and sends to it: the broker here is a stand-in
    built on shmq.protocol's RemotingServer, so this checks the server, the V2 send header and
    the send answer against a client nobody here wrote (the real broker comes later)."""
    import asyncio

    from shmq.message.msgid import create_offset_msg_id
    from shmq.message.properties import decode_properties
    from shmq.protocol import RemotingClient, RemotingServer
    from shmq.protocol.bodies import decode_heartbeat
    from shmq.protocol.headers import SendMessageResponseHeader, decode_send_header
    sent: list[tuple] = []
    heartbeats: list = []

    def heartbeat(conn, cmd):
        heartbeats.append(decode_heartbeat(cmd.body))
        return cmd.make_response()

    async def send(conn, cmd):
        h = decode_send_header(cmd.code, cmd.ext_fields)
        sent.append((cmd.code, cmd.ext_fields, h, cmd.body))
        offset = len(sent) - 1
        return cmd.make_response(ext_fields=SendMessageResponseHeader(
            msgId=create_offset_msg_id("127.0.0.1", port, 1000 + offset), queueId=h.queueId, queueOffset=offset,
            MSG_REGION="DefaultRegion", TRACE_ON="true").to_ext())

    async def main():
        nonlocal port
        server = RemotingServer({34: heartbeat, 310: send, 35: lambda c, cmd: cmd.make_response()}, "127.0.0.1", 0)
        await server.start()
        port = server.port
        body = encode_register_body(RegisterBrokerBody(topicConfigSerializeWrapper=TopicConfigSerializeWrapper(
            topicConfigTable={"Orders": TopicConfig(topicName="Orders", readQueueNums=2, writeQueueNums=2)})))
        h = RegisterBrokerRequestHeader(brokerName="stand-in", brokerAddr=f"127.0.0.1:{port}",
                                        clusterName="DefaultCluster", haServerAddr="", brokerId=0)
        async with RemotingClient(namesrv.addr) as ns:
            (await ns.invoke(request(RequestCode.REGISTER_BROKER, h, body))).raise_for_code()
            try:
                return await asyncio.to_thread(
                    ons, "produce", "--namesrv", namesrv.addr, "--topic", "Orders", "--group", "pg",
                    "--count", "3", "--tags", "created", "--keys", "o")
            finally:
                await server.close()

    port = 0
    events = asyncio.run(main())
    acks = [e for e in events if e["event"] == "sent"]
    assert [(a["status"], a["queueOffset"], a["brokerName"]) for a in acks] == [
        ("SEND_OK", 0, "stand-in"), ("SEND_OK", 1, "stand-in"), ("SEND_OK", 2, "stand-in")]
    assert acks[0]["msgId"] == create_offset_msg_id("127.0.0.1", port, 1000)
    assert [body for *_, body in sent] == [b"msg-0", b"msg-1", b"msg-2"]
    code, ext, hdr, _ = sent[0]
    assert code == RequestCode.SEND_MESSAGE_V2 and ext["a"] == "pg" and ext["b"] == "Orders"
    assert hdr.queueId in (0, 1) and hdr.bornTimestamp > 0 and hdr.unitMode is False
    props = decode_properties(hdr.properties)
    assert props["TAGS"] == "created" and props["KEYS"] == "o-0"
    # (ali-ons heart-beats on a timer, not before its first send: any that came must parse.)
    assert all(hb.producerDataSet[0].groupName == "pg" for hb in heartbeats)
