"""The supervisor's pure tables: client registry, queue locks, topic table and derivation,
broker.conf parsing."""
from __future__ import annotations

import json

import pytest

from shmq.broker.supervisor.clients import ChannelInfo, ClientRegistry
from shmq.broker.shared.config import BrokerConfig, parse_delay_levels
from shmq.broker.supervisor.locks import LockTable
from shmq.broker.shared.topics import TopicTable, default_topics, derive_from_default
from shmq.protocol.bodies import ConsumerData, MessageQueue, SubscriptionData, TopicConfig


def _info(chan, cid, t=0.0):
    return ChannelInfo(chan=chan, client_id=cid, language="JAVA", version=409, addr="x", last_update=t)


def _cd(group, subs=("T",)):
    return ConsumerData(groupName=group, subscriptionDataSet=[SubscriptionData(topic=t) for t in subs])


def test_registry_changes_expiry_and_worker_loss():
    r = ClientRegistry()
    assert r.register_consumer(_cd("g"), _info("1:1", "a")) is True        # new member
    assert r.register_consumer(_cd("g"), _info("1:1", "a", 5)) is False    # a refresh
    assert r.register_consumer(_cd("g", ("T", "U")), _info("1:1", "a")) is True  # subscriptions changed
    assert r.register_consumer(_cd("g", ("T", "U")), _info("2:7", "b", 10)) is True
    assert sorted(r.consumer_ids("g")) == ["a", "b"]
    assert r.expired(now=100.0, expiry_s=95.0) == {"1:1"}
    assert r.drop_channels(lambda i: i.chan == "1:1") == ["g"]
    assert r.worker_gone(2) == []          # last member gone: the group goes, nobody to tell
    assert r.consumer_ids("g") == []
    r.register_producer("pg", _info("1:3", "p"))
    assert r.channel_closed("1:3") == [] and r.producer_channels("pg") == []


def test_group_keeps_the_newest_subscription_version_any_member_sent():
    """Members re-version a subscription at every rebalance and pull with it; an older
    version from another member's heartbeat must not replace it (RocketMQ's
    ConsumerGroupInfo.updateSubscription), or the newer member's pulls get 25."""
    r = ClientRegistry()
    sub = lambda v: ConsumerData(groupName="g", subscriptionDataSet=[SubscriptionData(topic="T", subVersion=v)])  # noqa: E731
    r.register_consumer(sub(100), _info("1:1", "a"))
    r.register_consumer(sub(300), _info("1:1", "a"))
    r.register_consumer(sub(200), _info("2:1", "b"))   # b's heartbeat carries its older version
    assert r.subscription("g", "T").subVersion == 300
    assert r.register_consumer(ConsumerData(groupName="g", subscriptionDataSet=[]), _info("1:1", "a")) is True
    assert r.subscription("g", "T") is None           # a topic no longer subscribed goes


def test_locks():
    t = LockTable(max_live_s=60)
    q0, q1 = MessageQueue(topic="T", brokerName="b", queueId=0), MessageQueue(topic="T", brokerName="b", queueId=1)
    assert t.try_lock("g", "a", [q0, q1], now=0) == [q0, q1]
    assert t.try_lock("g", "b", [q0, q1], now=30) == []
    assert t.try_lock("g", "a", [q0], now=50) == [q0]          # renewal
    assert t.try_lock("g", "b", [q0, q1], now=70) == [q1]      # q1 expired, q0 renewed at 50
    t.unlock("g", "b", [q0])                                   # not b's: stays
    assert t.holder("g", q0, now=70) == "a"
    t.unlock("g", "a", [q0])
    assert t.holder("g", q0, now=70) is None


def test_topic_table_persists_in_rocketmq_shape(tmp_path):
    path = str(tmp_path / "topics.json")
    t = TopicTable(path)
    assert t.put_many(default_topics("C", "b1", True, 4))
    v = t.version.counter
    assert not t.put(t.get("TBW102"))                          # no change, no new version
    assert t.put(TopicConfig(topicName="X", readQueueNums=2, writeQueueNums=2))
    assert t.version.counter == v + 1
    with open(path) as f:
        data = json.load(f)
    assert data["topicConfigTable"]["X"] == {"order": False, "perm": 6, "readQueueNums": 2, "topicFilterType": "SINGLE_TAG",
                                             "topicName": "X", "topicSysFlag": 0, "writeQueueNums": 2}
    assert set(data["dataVersion"]) == {"counter", "timestamp"}
    t2 = TopicTable(path)
    t2.load()
    assert t2.get("X") == t.get("X") and t2.get("TBW102").perm == 7 and t2.get("TBW102").writeQueueNums == 4
    assert t2.delete("X") and not t2.delete("X")


def test_derive_from_default():
    tbw = TopicConfig(topicName="TBW102", readQueueNums=4, writeQueueNums=4, perm=7)
    tc = derive_from_default("New", tbw, 8)
    assert (tc.readQueueNums, tc.writeQueueNums, tc.perm) == (4, 4, 6)
    assert derive_from_default("New", TopicConfig(topicName="D", perm=6), 4) is None   # no INHERIT
    assert derive_from_default("%RETRY%g", None, 4).writeQueueNums == 1
    assert derive_from_default("New", None, 4) is None


def test_config_keys():
    c = BrokerConfig()
    unknown = c.update({"brokerName": "b", "listenPort": "10911", "autoCreateTopicEnable": "FALSE",
                        "fileReservedTime": "48", "serverWorkerThreads": "8", "bogus": "1"})
    assert unknown == ["bogus"] and c.autoCreateTopicEnable is False and c.fileReservedTime == 48.0
    assert c.vip_port == 10909 and c.store_config().file_reserved_time_hours == 48.0
    c.update({"namesrvAddr": "a:1;b:2;"})
    assert c.namesrv_list == ["a:1", "b:2"]
    with pytest.raises(ValueError):
        c.update({"brokerRole": "MASTERISH"})
    with pytest.raises(ValueError):
        c.update({"messageDelayLevel": "1s 2x"})
    assert parse_delay_levels("1s 5s 1m 2h 500ms") == [1000, 5000, 60000, 7200000, 500]
    assert BrokerConfig.from_json(c.to_json()) == c


def test_a_pushed_table_keeps_the_objects_of_unchanged_topics(tmp_path):
    """A worker adopting the supervisor's table keeps each unchanged topic's TopicConfig object
    (its C send path serves a learnt queue only under the same object) and takes the new one
    of a changed topic."""
    sup = TopicTable(str(tmp_path / "topics.json"))
    sup.put_many([TopicConfig(topicName="A", readQueueNums=4, writeQueueNums=4),
                  TopicConfig(topicName="B", readQueueNums=4, writeQueueNums=4)])
    worker = TopicTable(None)
    worker.replace(sup.encode())
    a, b = worker.get("A"), worker.get("B")
    sup.put(TopicConfig(topicName="C"))                                  # a topic created elsewhere
    sup.put(TopicConfig(topicName="B", readQueueNums=8, writeQueueNums=8))  # one changed
    worker.replace(sup.encode())
    assert worker.get("A") is a
    assert worker.get("B") is not b and worker.get("B").writeQueueNums == 8
    assert worker.get("C").topicName == "C"
    sup.delete("A")
    worker.replace(sup.encode())
    assert worker.get("A") is None
