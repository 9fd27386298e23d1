"""The broker's seams to the put pipeline, schedule service and retry logic, over the wire
(2 workers): a delayed send is held in SCHEDULE_TOPIC_XXXX and delivered by the supervisor
when due (answering a held pull); CONSUMER_SEND_MSG_BACK stores the retry copy in
%RETRY%<group>, and a %RETRY% send past maxReconsumeTimes lands in %DLQ%<group>."""
from __future__ import annotations

import json
import time

from shmq.message.record import iter_records
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.bodies import decode_json
from shmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader, send_header_to_v2

from .broker_helpers import create_topic, pull, send, start_broker  # noqa: F401
from .conftest import processes  # noqa: F401

LEVELS = "300ms 600ms 1s"


def test_delayed_send_is_delivered_when_due(start_broker):
    br = start_broker(settings={"messageDelayLevel": LEVELS})
    with SyncRemotingClient(br.addr, timeout=10) as c, SyncRemotingClient(br.addr, timeout=10) as d:
        create_topic(c, "DT", queues=1)
        t0 = time.monotonic()
        r = send(c, "DT", b"later", props="DELAY\x012\x02")
        assert r.code == 0 and r.ext_fields["queueId"] == "0"
        assert pull(d, "DT", 0, 0).code == 19  # not there yet: it waits in SCHEDULE_TOPIC_XXXX
        p = pull(d, "DT", 0, 0, suspend_ms=10_000, timeout=15)  # held until the supervisor re-puts it
        elapsed = time.monotonic() - t0
        assert p.code == 0, (p.code, p.remark)
        (m,) = list(iter_records(p.body))
        assert bytes(m.body) == b"later" and m.properties["REAL_TOPIC"] == "DT"
        assert "DELAY" not in m.properties
        assert elapsed >= 0.55, "no earlier than due (600 ms)"


def test_send_back_and_dead_letter(start_broker):
    br = start_broker(settings={"messageDelayLevel": LEVELS, "maxReconsumeTimes": 2})
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "RT", queues=1)
        hb = {"clientID": "c1", "consumerDataSet": [{"groupName": "rg", "subscriptionDataSet": [
            {"topic": "RT", "subString": "*"}, {"topic": "%RETRY%rg", "subString": "*"}]}]}
        assert c.invoke(request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())).code == 0
        assert send(c, "RT", b"fragile", tags="t").code == 0
        (m,) = list(iter_records(pull(c, "RT", 0, 0).body))
        r = c.invoke(request(RequestCode.CONSUMER_SEND_MSG_BACK, offset=m.phys_offset, group="rg", delayLevel=1,
                             originMsgId=m.offset_msg_id, originTopic="RT", maxReconsumeTimes=2))
        assert r.code == 0, r.remark
        h = PullMessageRequestHeader(consumerGroup="rg", topic="%RETRY%rg", queueId=0, queueOffset=0, maxMsgNums=32,
                                     sysFlag=2 | 4, commitOffset=0, suspendTimeoutMillis=10_000, subVersion=0,
                                     subscription="*")
        p = c.invoke(request(RequestCode.PULL_MESSAGE, h), 15)
        assert p.code == 0, (p.code, p.remark)
        (retry,) = list(iter_records(p.body))
        assert bytes(retry.body) == b"fragile" and retry.reconsume_times == 1
        assert retry.properties["RETRY_TOPIC"] == "RT"
        # a %RETRY% send at maxReconsumeTimes goes to %DLQ%rg instead
        sh = SendMessageRequestHeader(producerGroup="pg", topic="%RETRY%rg", defaultTopic="TBW102",
                                      defaultTopicQueueNums=4, queueId=0, sysFlag=0, bornTimestamp=0, flag=0,
                                      properties="TAGS\x01t", reconsumeTimes=2, maxReconsumeTimes=2)
        r = c.invoke(request(RequestCode.SEND_MESSAGE_V2, send_header_to_v2(sh), b"dead"))
        assert r.code == 0, r.remark
        deadline = time.monotonic() + 5
        while True:
            p = pull(c, "%DLQ%rg", 0, 0)
            if p.code != 17 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert p.code == 0, (p.code, p.remark)
        assert [bytes(x.body) for x in iter_records(p.body)] == [b"dead"]
        tops = decode_json(c.invoke(request(RequestCode.GET_ALL_TOPIC_CONFIG)).body, dict)["topicConfigTable"]
        assert tops["%DLQ%rg"]["readQueueNums"] == 1
