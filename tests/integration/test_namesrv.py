"""shmq-namesrv as a process: brokers (test doubles speaking remoting) register, expire, go away."""
from __future__ import annotations

import time

import pytest

from shmq.message.layout import masked_crc32
from shmq.protocol import RequestCode, ResponseCode, SerializeType, SyncRemotingClient, request
from shmq.protocol.bodies import (ClusterInfo, DataVersion, RegisterBrokerBody, TopicConfig,
                                  TopicConfigSerializeWrapper, TopicList, decode_json, decode_topic_route, encode_json,
                                  encode_register_body)
from shmq.protocol.headers import QueryDataVersionRequestHeader, RegisterBrokerRequestHeader

SHORT = {"brokerChannelExpiredTime": 1200, "scanNotActiveBrokerInterval": 100}


class BrokerDouble:
    """Registers like a Java broker: one persistent connection per NameServer, masked CRC, compressed or not."""

    def __init__(self, namesrvs, name, addr, topics, *, broker_id=0, cluster="DefaultCluster", compressed=False):
        self.clients = [SyncRemotingClient(ns.addr) for ns in namesrvs]
        self.name, self.addr, self.broker_id, self.cluster = name, addr, broker_id, cluster
        self.topics = {t: TopicConfig(topicName=t, readQueueNums=q, writeQueueNums=q) for t, q in topics.items()}
        self.version = DataVersion(timestamp=int(time.time() * 1000), counter=1)
        self.compressed = compressed

    def header(self, body: bytes) -> RegisterBrokerRequestHeader:
        return RegisterBrokerRequestHeader(
            brokerName=self.name, brokerAddr=self.addr, clusterName=self.cluster,
            haServerAddr=self.addr.replace(":1", ":2"), brokerId=self.broker_id,
            compressed=self.compressed, bodyCrc32=masked_crc32(body),
        )

    def register(self):
        body = encode_register_body(
            RegisterBrokerBody(topicConfigSerializeWrapper=TopicConfigSerializeWrapper(
                topicConfigTable=self.topics, dataVersion=self.version)),
            compressed=self.compressed,
        )
        answers = [c.invoke(request(RequestCode.REGISTER_BROKER, self.header(body), body)) for c in self.clients]
        assert all(a.code == ResponseCode.SUCCESS for a in answers), answers
        return answers

    def query_data_version(self):
        h = QueryDataVersionRequestHeader(brokerName=self.name, brokerAddr=self.addr,
                                          clusterName=self.cluster, brokerId=self.broker_id)
        return [c.invoke(request(RequestCode.QUERY_DATA_VERSION, h, encode_json(self.version))) for c in self.clients]

    def close(self):
        for c in self.clients:
            c.close()


@pytest.fixture
def doubles():
    made: list[BrokerDouble] = []

    def make(*a, **kw) -> BrokerDouble:
        d = BrokerDouble(*a, **kw)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


def ask(ns, code, *, body=b"", version=None, **ext):
    with SyncRemotingClient(ns.addr) as c:
        cmd = request(code, body=body, **ext)
        if version is not None:
            cmd.version = version
        return c.invoke(cmd)


def route(ns, topic):
    r = ask(ns, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic=topic)
    return decode_topic_route(r.body) if r.code == ResponseCode.SUCCESS else None


def brokers_of(ns, topic):
    r = route(ns, topic)
    return sorted(b.brokerName for b in r.brokerDatas) if r else []


def wait_until(cond, timeout=5.0, step=0.05, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(step)
    raise AssertionError(f"{what} not reached within {timeout}s")


def test_two_brokers_register_and_share_a_topic(namesrv, doubles):
    b1 = doubles([namesrv], "b1", "127.0.0.1:10911", {"TopicA": 4, "OnlyB1": 2})
    b2 = doubles([namesrv], "b2", "127.0.0.1:10921", {"TopicA": 8}, compressed=True)
    b1.register()
    b2.register()
    r = route(namesrv, "TopicA")
    assert [(q.brokerName, q.readQueueNums, q.writeQueueNums, q.perm) for q in r.queueDatas] == [
        ("b1", 4, 4, 6), ("b2", 8, 8, 6)]
    assert [(b.brokerName, b.cluster, b.brokerAddrs) for b in r.brokerDatas] == [
        ("b1", "DefaultCluster", {0: "127.0.0.1:10911"}), ("b2", "DefaultCluster", {0: "127.0.0.1:10921"})]
    assert brokers_of(namesrv, "OnlyB1") == ["b1"]

    # The raw body: bare broker-id keys for an old client, quoted for 4.9.4+ or on request.
    old = ask(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="OnlyB1", version=121).body
    assert old == (b'{"brokerDatas":[{"brokerAddrs":{0:"127.0.0.1:10911"},"brokerName":"b1","cluster":"DefaultCluster"}],'
                   b'"filterServerTable":{},"queueDatas":[{"brokerName":"b1","perm":6,"readQueueNums":2,'
                   b'"topicSysFlag":0,"writeQueueNums":2}]}')
    new = ask(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="OnlyB1", version=409).body
    assert new == old.replace(b"{0:", b'{"0":')
    asked = ask(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="OnlyB1", version=121, acceptStandardJsonOnly=True)
    assert asked.body == new

    info = decode_json(ask(namesrv, RequestCode.GET_BROKER_CLUSTER_INFO).body, ClusterInfo)
    assert info.clusterAddrTable == {"DefaultCluster": ["b1", "b2"]}
    assert info.brokerAddrTable["b2"].brokerAddrs == {0: "127.0.0.1:10921"}
    topics = decode_json(ask(namesrv, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER).body, TopicList)
    assert topics.topicList == ["OnlyB1", "TopicA"]


def test_unknown_topic_is_topic_not_exist_with_rocketmq_remark(namesrv):
    r = ask(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Nope")
    assert r.code == ResponseCode.TOPIC_NOT_EXIST == 17
    assert r.remark == ("No topic route info in name server for the topic: Nope"
                        "\nSee http://rocketmq.apache.org/docs/faq/ for further details.")


def test_silent_broker_expires_and_route_changes(start_namesrv, doubles):
    ns = start_namesrv(settings=SHORT)
    alive = doubles([ns], "b1", "127.0.0.1:10911", {"TopicA": 4})
    silent = doubles([ns], "b2", "127.0.0.1:10921", {"TopicA": 4, "OnlyB2": 4})
    alive.register()
    silent.register()
    assert brokers_of(ns, "TopicA") == ["b1", "b2"]
    deadline = time.monotonic() + 6.0
    while brokers_of(ns, "TopicA") != ["b1"]:
        assert time.monotonic() < deadline, "silent broker was not dropped"
        alive.register()  # the heartbeat, every 200 ms; b2 keeps its connection open but says nothing
        time.sleep(0.2)
    assert route(ns, "OnlyB2") is None
    # b1 stays as long as it heart-beats, well past the expiry.
    for _ in range(8):
        alive.register()
        time.sleep(0.2)
    assert brokers_of(ns, "TopicA") == ["b1"]
    assert "127.0.0.1:10921 removed (expired: silent for" in ns.log()
    assert "brokerChannelExpiredTime 1200 ms" in ns.log()


def test_query_data_version_counts_as_heartbeat(start_namesrv, doubles):
    ns = start_namesrv(settings=SHORT)
    b = doubles([ns], "b1", "127.0.0.1:10911", {"TopicA": 4})
    b.register()
    for _ in range(12):  # 2.4 s, twice the expiry
        (resp,) = b.query_data_version()
        assert resp.code == 0 and resp.ext_fields["changed"] == "false"
        assert decode_json(resp.body, DataVersion) == b.version
        time.sleep(0.2)
    assert brokers_of(ns, "TopicA") == ["b1"]
    b.version = DataVersion(timestamp=b.version.timestamp + 1, counter=2)
    assert b.query_data_version()[0].ext_fields["changed"] == "true"


def test_two_namesrvs_each_hold_the_full_table(start_namesrv, doubles):
    ns1, ns2 = start_namesrv(), start_namesrv()
    doubles([ns1, ns2], "b1", "127.0.0.1:10911", {"TopicA": 4}).register()
    doubles([ns1, ns2], "b2", "127.0.0.1:10921", {"TopicA": 2, "TopicB": 2}, compressed=True).register()
    for ns in (ns1, ns2):
        assert brokers_of(ns, "TopicA") == ["b1", "b2"]
        assert brokers_of(ns, "TopicB") == ["b2"]
    assert ask(ns1, RequestCode.GET_BROKER_CLUSTER_INFO).body == ask(ns2, RequestCode.GET_BROKER_CLUSTER_INFO).body
    # Independent: one NameServer going away changes nothing for the other.
    ns1.stop()
    assert brokers_of(ns2, "TopicA") == ["b1", "b2"]


def test_closed_broker_connection_drops_it_at_once(namesrv, doubles):
    b1 = doubles([namesrv], "b1", "127.0.0.1:10911", {"TopicA": 4})
    b2 = doubles([namesrv], "b2", "127.0.0.1:10921", {"TopicA": 4})
    b1.register()
    b2.register()
    t0 = time.monotonic()
    b2.close()  # default expiry is 120 s: only the close can explain a quick removal
    wait_until(lambda: brokers_of(namesrv, "TopicA") == ["b1"], timeout=3.0, what="b2 removed")
    assert time.monotonic() - t0 < 3.0
    assert "127.0.0.1:10921 removed (its connection" in namesrv.log()


def test_unregister_and_slave_registration(namesrv, doubles):
    master = doubles([namesrv], "b1", "127.0.0.1:10911", {"TopicA": 4})
    slave = doubles([namesrv], "b1", "127.0.0.1:10931", {"TopicA": 4}, broker_id=1)
    master.register()
    (ans,) = slave.register()
    assert ans.ext_fields == {"masterAddr": "127.0.0.1:10911", "haServerAddr": "127.0.0.1:20911"}
    assert route(namesrv, "TopicA").brokerDatas[0].brokerAddrs == {0: "127.0.0.1:10911", 1: "127.0.0.1:10931"}
    r = ask(namesrv, RequestCode.UNREGISTER_BROKER, brokerName="b1", brokerAddr="127.0.0.1:10931",
            clusterName="DefaultCluster", brokerId=1)
    assert r.code == 0
    assert route(namesrv, "TopicA").brokerDatas[0].brokerAddrs == {0: "127.0.0.1:10911"}
    ask(namesrv, RequestCode.UNREGISTER_BROKER, brokerName="b1", brokerAddr="127.0.0.1:10911",
        clusterName="DefaultCluster", brokerId=0)
    assert route(namesrv, "TopicA") is None


def test_register_body_crc_is_checked(namesrv, doubles):
    b = doubles([namesrv], "b1", "127.0.0.1:10911", {"TopicA": 4})
    body = encode_register_body(RegisterBrokerBody())
    h = b.header(body)
    h.bodyCrc32 = masked_crc32(body) ^ 1
    r = b.clients[0].invoke(request(RequestCode.REGISTER_BROKER, h, body))
    assert (r.code, r.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")
    h.bodyCrc32 = 0  # 0 means "not computed": accepted unchecked, as in RocketMQ
    assert b.clients[0].invoke(request(RequestCode.REGISTER_BROKER, h, body)).code == 0


def test_kv_config_as_rocketmq_answers(namesrv):
    miss = ask(namesrv, RequestCode.GET_KV_CONFIG, namespace="NS", key="k")
    assert (miss.code, miss.remark) == (ResponseCode.QUERY_NOT_FOUND, "No config item, Namespace: NS Key: k")
    assert ask(namesrv, RequestCode.PUT_KV_CONFIG, namespace="NS", key="k", value="v1").code == 0
    got = ask(namesrv, RequestCode.GET_KV_CONFIG, namespace="NS", key="k")
    assert (got.code, got.ext_fields) == (0, {"value": "v1"})
    assert ask(namesrv, RequestCode.DELETE_KV_CONFIG, namespace="NS", key="k").code == 0
    assert ask(namesrv, RequestCode.DELETE_KV_CONFIG, namespace="NS", key="k").code == 0  # idempotent
    assert ask(namesrv, RequestCode.GET_KV_CONFIG, namespace="NS", key="k").code == ResponseCode.QUERY_NOT_FOUND
    missing_field = ask(namesrv, RequestCode.GET_KV_CONFIG, namespace="NS")
    assert missing_field.code == ResponseCode.SYSTEM_ERROR and "key" in missing_field.remark


def test_update_namesrv_config_is_refused(namesrv):
    r = ask(namesrv, RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/tmp/evil\nlistenPort=1\n")
    assert r.code == ResponseCode.NO_PERMISSION
    cfg = ask(namesrv, RequestCode.GET_NAMESRV_CONFIG).body.decode()
    assert "kvConfigPath=\n" in cfg and "evil" not in cfg
    assert "UPDATE_NAMESRV_CONFIG from 127.0.0.1:" in namesrv.log()


def test_wipe_write_perm_and_delete_topic(namesrv, doubles):
    doubles([namesrv], "b1", "127.0.0.1:10911", {"TopicA": 4, "TopicB": 4}).register()
    r = ask(namesrv, RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="b1")
    assert (r.code, r.ext_fields) == (0, {"wipeTopicCount": "2"})
    assert route(namesrv, "TopicA").queueDatas[0].perm == 4
    assert ask(namesrv, RequestCode.DELETE_TOPIC_IN_NAMESRV, topic="TopicB").code == 0
    assert route(namesrv, "TopicB") is None
    assert route(namesrv, "TopicA") is not None


def test_binary_request_gets_binary_answer(namesrv):
    with SyncRemotingClient(namesrv.addr) as c:
        cmd = request(RequestCode.GET_ROUTEINFO_BY_TOPIC, topic="Nope")
        cmd.serialize_type = SerializeType.ROCKETMQ
        r = c.invoke(cmd)
        assert r.serialize_type == SerializeType.ROCKETMQ
        assert r.code == ResponseCode.TOPIC_NOT_EXIST


def test_config_file_and_unknown_key_warning(start_namesrv, tmp_path, doubles):
    conf = tmp_path / "namesrv.conf"
    conf.write_text("# a RocketMQ namesrv.conf\nlistenPort=9\nbrokerChannelExpiredTime = 1000\n"
                    "scanNotActiveBrokerInterval=100\nserverWorkerThreads=8\nnoSuchKey=1\n")
    ns = start_namesrv("-c", str(conf))  # --port 0 wins over listenPort
    assert ns.port != 9
    assert "unknown key 'noSuchKey' ignored" in ns.log()
    assert "serverWorkerThreads" not in ns.log()
    b = doubles([ns], "b1", "127.0.0.1:10911", {"TopicA": 4})
    b.register()
    wait_until(lambda: route(ns, "TopicA") is None, timeout=5.0, what="expiry from -c settings")


def test_cluster_lists_and_add_write_perm(namesrv, doubles):
    doubles([namesrv], "b1", "127.0.0.1:10911", {"TopicA": 4}, cluster="c1").register()
    doubles([namesrv], "b2", "127.0.0.1:10921", {"TopicB": 4}, cluster="c2").register()
    by_cluster = decode_json(ask(namesrv, RequestCode.GET_TOPICS_BY_CLUSTER, cluster="c1").body, TopicList)
    assert by_cluster.topicList == ["TopicA"]
    system = decode_json(ask(namesrv, RequestCode.GET_SYSTEM_TOPIC_LIST_FROM_NS).body, TopicList)
    assert system.topicList == ["c1", "b1", "c2", "b2"] and system.brokerAddr in ("127.0.0.1:10911", "127.0.0.1:10921")
    assert decode_json(ask(namesrv, RequestCode.GET_UNIT_TOPIC_LIST).body, TopicList).topicList == []
    ask(namesrv, RequestCode.WIPE_WRITE_PERM_OF_BROKER, brokerName="b1")
    r = ask(namesrv, RequestCode.ADD_WRITE_PERM_OF_BROKER, brokerName="b1")
    assert r.ext_fields == {"addTopicCount": "1"} and route(namesrv, "TopicA").queueDatas[0].perm == 6


def test_kv_config_persists_and_lists(start_namesrv, tmp_path):
    path = tmp_path / "kv" / "kvConfig.json"
    ns = start_namesrv(settings={"kvConfigPath": path})
    assert ask(ns, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ORDER_TOPIC_CONFIG").code == ResponseCode.QUERY_NOT_FOUND
    ask(ns, RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="Orders", value="b1:4")
    listed = ask(ns, RequestCode.GET_KVLIST_BY_NAMESPACE, namespace="ORDER_TOPIC_CONFIG")
    assert listed.body == b'{"table":{"Orders":"b1:4"}}'
    ns.stop()
    assert path.stat().st_mode & 0o777 == 0o600
    again = start_namesrv(settings={"kvConfigPath": path})
    got = ask(again, RequestCode.GET_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="Orders")
    assert got.ext_fields == {"value": "b1:4"}


def test_order_topic_conf_in_route_when_enabled(start_namesrv, doubles):
    ns = start_namesrv(settings={"orderMessageEnable": "true"})
    b = doubles([ns], "b1", "127.0.0.1:10911", {"Orders": 4})
    ask(ns, RequestCode.PUT_KV_CONFIG, namespace="ORDER_TOPIC_CONFIG", key="Orders", value="b1:4")
    (ans,) = b.register()
    assert ans.body == b'{"table":{"Orders":"b1:4"}}'  # brokers learn the order config on registration
    assert route(ns, "Orders").orderTopicConf == "b1:4"
