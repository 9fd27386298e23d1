"""The broker's seams to transactions (half message, END_TRANSACTION, check-back on the
producer's own connection) and SQL92 filtering (enablePropertyFilter), over the wire."""
from __future__ import annotations

import json

from shmq.message.record import iter_records
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader, send_header_to_v2

from .broker_helpers import create_topic, pull, send, start_broker  # noqa: F401
from .conftest import processes  # noqa: F401


def _half(c, topic: str, body: bytes, group: str = "txg"):
    sh = SendMessageRequestHeader(producerGroup=group, topic=topic, defaultTopic="TBW102", defaultTopicQueueNums=4,
                                  queueId=0, sysFlag=4, bornTimestamp=0, flag=0,
                                  properties=f"TRAN_MSG\x01true\x02PGROUP\x01{group}\x02UNIQ_KEY\x01U{body.decode()}")
    r = c.invoke(request(RequestCode.SEND_MESSAGE_V2, send_header_to_v2(sh), body))
    assert r.code == 0, r.remark
    return r


def _end(c, msg_id: str, queue_offset, what: int, group: str = "txg"):
    from shmq.message.msgid import decode_offset_msg_id
    _, _, phys = decode_offset_msg_id(msg_id)
    return c.invoke(request(RequestCode.END_TRANSACTION, producerGroup=group, tranStateTableOffset=queue_offset,
                            commitLogOffset=phys, commitOrRollback=what, fromTransactionCheck="false", msgId=msg_id))


def test_half_commit_rollback_and_check_back(start_broker):
    br = start_broker(settings={"transactionCheckInterval": 300, "transactionTimeOut": 300})
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "TX", queues=1)
        hb = {"clientID": "p1", "producerDataSet": [{"groupName": "txg"}]}
        assert c.invoke(request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())).code == 0
        a, b, q = _half(c, "TX", b"a"), _half(c, "TX", b"b"), _half(c, "TX", b"q")
        assert pull(c, "TX", 0, 0).code == 19  # half messages are invisible
        assert _end(c, a.ext_fields["msgId"], a.ext_fields["queueOffset"], 8).code == 0   # commit
        assert _end(c, b.ext_fields["msgId"], b.ext_fields["queueOffset"], 12).code == 0  # rollback
        (m,) = list(iter_records(pull(c, "TX", 0, 0).body))
        assert bytes(m.body) == b"a" and "TRAN_MSG" not in m.properties
        # the third is left open: the broker asks the producer, on its own connection
        while True:
            n = c.receive(10)
            if n.code == RequestCode.CHECK_TRANSACTION_STATE:
                break
        assert n.ext_fields["transactionId"] == "Uq"
        (half,) = list(iter_records(n.body))
        assert bytes(half.body) == b"q" and half.topic == "TX"
        assert _end(c, n.ext_fields["offsetMsgId"], n.ext_fields["tranStateTableOffset"], 8).code == 0
        p = pull(c, "TX", 0, 1)
        assert p.code == 0 and [bytes(x.body) for x in iter_records(p.body)] == [b"q"]
        del q


def test_sql92_filter_when_enabled(start_broker):
    br = start_broker(settings={"enablePropertyFilter": "true"})
    with SyncRemotingClient(br.addr, timeout=10) as c:
        create_topic(c, "SQ", queues=1)
        for i in range(6):
            assert send(c, "SQ", b"%d" % i, props=f"amount\x01{i * 50}\x02").code == 0

        def sql(expr):
            h = PullMessageRequestHeader(consumerGroup="sg", topic="SQ", queueId=0, queueOffset=0, maxMsgNums=32,
                                         sysFlag=4, commitOffset=0, suspendTimeoutMillis=0, subVersion=0,
                                         subscription=expr, expressionType="SQL92")
            return c.invoke(request(RequestCode.PULL_MESSAGE, h))
        r = sql("amount > 100")
        assert r.code == 0 and [bytes(m.body) for m in iter_records(r.body)] == [b"3", b"4", b"5"]
        assert sql("amount >").code == 23
    br2 = start_broker()  # off by default: refused as RocketMQ refuses it
    with SyncRemotingClient(br2.addr, timeout=10) as c:
        create_topic(c, "SQ", queues=1)
        h = PullMessageRequestHeader(consumerGroup="sg", topic="SQ", queueId=0, queueOffset=0, maxMsgNums=32,
                                     sysFlag=4, commitOffset=0, suspendTimeoutMillis=0, subVersion=0,
                                     subscription="a > 1", expressionType="SQL92")
        assert c.invoke(request(RequestCode.PULL_MESSAGE, h)).code == 1
