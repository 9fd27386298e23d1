"""ENOSPC at a config write (topics.json, subscriptionGroup.json, consumerOffset.json): the
request that needed it gets an error, the old file stays whole (files are replaced atomically),
the broker neither crashes nor keeps in memory what it could not write; after space returns the
same request succeeds and is persisted."""
from __future__ import annotations

import json
import os

from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import encode_json
from shmq.store.offsets_file import loads_int_keys

from ..integration.broker_helpers import create_topic, send, start_broker  # noqa: F401
from ..integration.conftest import processes  # noqa: F401
from .helpers import drain, wait_for


def _config(br, name: str) -> bytes:
    with open(os.path.join(br.store, "config", name), "rb") as f:
        return f.read()


def _topic_route_has(c, topic: str) -> bool:
    r = c.invoke(request(RequestCode.GET_ALL_TOPIC_CONFIG))
    return r.code == 0 and topic.encode() in r.body


def test_topics_json_enospc_refuses_the_create_and_keeps_the_old_file(start_broker, fault_file):
    br = start_broker(workers=1)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        assert create_topic(c, "Before").code == 0
        before = _config(br, "topics.json")
        fault_file.set("enospc:write:/config/topics.json")
        r = create_topic(c, "During")
        assert r.code != 0 and "No space left" in (r.remark or ""), (r.code, r.remark)
        assert _config(br, "topics.json") == before
        assert not _topic_route_has(c, "During")            # not kept in memory either
        assert send(c, "Before", b"still served").code == 0
        fault_file.clear()
        assert create_topic(c, "During").code == 0
        assert b'"During"' in _config(br, "topics.json")
        assert _topic_route_has(c, "During")
    assert [n for n in os.listdir(os.path.join(br.store, "config")) if n.startswith(".tmp-")] == []
    assert br.alive()


def test_subscription_group_enospc_refuses_the_update_and_keeps_the_old_file(start_broker, fault_file):
    br = start_broker(workers=1)

    def update(name: str):
        return c.invoke(request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP,
                                body=encode_json({"groupName": name, "retryMaxTimes": 3})))

    def groups() -> dict:
        r = c.invoke(request(RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG))
        return json.loads(r.body)["subscriptionGroupTable"]

    with SyncRemotingClient(br.addr, timeout=10) as c:
        assert update("g-before").code == 0
        before = _config(br, "subscriptionGroup.json")
        fault_file.set("enospc:write:/config/subscriptionGroup.json")
        r = update("g-during")
        assert r.code != 0 and "No space left" in (r.remark or ""), (r.code, r.remark)
        assert _config(br, "subscriptionGroup.json") == before
        assert "g-during" not in groups() and "g-before" in groups()
        fault_file.clear()
        assert update("g-during").code == 0
        assert "g-during" in json.loads(_config(br, "subscriptionGroup.json"))["subscriptionGroupTable"]
    assert br.alive()


def test_consumer_offset_enospc_keeps_offsets_in_memory_and_the_old_file(start_broker, fault_file):
    br = start_broker(workers=1)

    def commit(offset: int):
        return c.invoke(request(RequestCode.UPDATE_CONSUMER_OFFSET, consumerGroup="og", topic="OT", queueId=0,
                                commitOffset=offset))

    def on_disk() -> dict:
        try:
            return loads_int_keys(_config(br, "consumerOffset.json").decode())["offsetTable"].get("OT@og", {})
        except (FileNotFoundError, ValueError):
            return {}

    with SyncRemotingClient(br.addr, timeout=10) as c:
        assert create_topic(c, "OT", queues=1).code == 0
        for i in range(5):
            assert send(c, "OT", b"m%d" % i).code == 0
        assert commit(2).code == 0
        assert wait_for(lambda: on_disk() == {"0": 2}, 10), on_disk()
        fault_file.set("enospc:write:/config/consumerOffset.json")
        assert commit(4).code == 0                       # kept in the shared offset table
        q = c.invoke(request(RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup="og", topic="OT", queueId=0))
        assert q.ext_fields["offset"] == "4"
        assert wait_for(lambda: "consumerOffset.json not written" in br.log(), 10)
        assert on_disk() == {"0": 2}                     # the old file, whole
        fault_file.clear()
        assert wait_for(lambda: on_disk() == {"0": 4}, 10), on_disk()
    log = br.log()
    assert log.count("consumerOffset.json not written") == 1 and "Traceback" not in log


def test_timer_checkpoint_enospc_is_said_once_and_written_after(start_broker, fault_file):
    fault_file.set("enospc:write:/shmqtimer/checkpoint")
    br = start_broker(workers=1)
    assert wait_for(lambda: "timer checkpoint not written" in br.log(), 10)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        assert create_topic(c, "TT", queues=1).code == 0
        assert send(c, "TT", b"still accepted").code == 0
    fault_file.clear()
    assert wait_for(lambda: "timer checkpoint written again" in br.log(), 10)
    log = br.log()
    assert log.count("timer checkpoint not written") == 1 and "Traceback" not in log


def test_delay_offset_enospc_is_said_once_and_written_after(start_broker, fault_file):
    fault_file.set("enospc:write:/config/delayOffset.json")
    br = start_broker(workers=1)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        assert create_topic(c, "DT", queues=1).code == 0
        assert send(c, "DT", b"delayed", props="DELAY\x011\x02").code == 0     # level 1: 1 s
        assert wait_for(lambda: drain(c, "DT") == [b"delayed"], 15)           # delivered all the same
    assert wait_for(lambda: "cannot write delayOffset.json" in br.log(), 10)
    fault_file.clear()
    assert wait_for(lambda: "delayOffset.json written again" in br.log(), 10)
    log = br.log()
    assert log.count("cannot write delayOffset.json") == 1 and "Traceback" not in log
