"""Held pulls and the worker that appends (broker/worker/pull_hold.py): a worker's own appends
do not wake its pull-wake thread (its loop looks at its held pulls itself after each append),
while every other appender still does. So a held pull is answered with the new message whether
the send, a batch or a transaction's commit lands on the pull's worker or on another one."""
from __future__ import annotations

import json

from shmq.message.batch import BatchEntry, encode_batch
from shmq.message.record import iter_records
from shmq.protocol import RequestCode, SyncRemotingClient, request
from shmq.protocol.headers import PullMessageRequestHeader, SendMessageRequestHeader, send_header_to_v2

from .broker_helpers import clients_on_two_workers, create_topic, send, start_broker, worker_id  # noqa: F401
from .conftest import processes  # noqa: F401
from .test_broker_tx_sql_wire import _end, _half


def _same_worker(addr: str, tries: int = 64) -> tuple[SyncRemotingClient, SyncRemotingClient]:
    """Two connections one worker serves. The broker hands a new connection to the worker
    serving fewer (broker/shared/placement.py), so the others stay open until a tie lets the
    kernel's hash place one beside the first; then they are closed."""
    first = SyncRemotingClient(addr, timeout=10)
    w0 = worker_id(first)
    others: list[SyncRemotingClient] = []
    try:
        for _ in range(tries):
            c = SyncRemotingClient(addr, timeout=10)
            if worker_id(c) == w0:
                return first, c
            others.append(c)
    finally:
        for o in others:
            o.close()
    first.close()
    raise AssertionError("no two connections went to the same worker")


def _park(d: SyncRemotingClient, topic: str, offset: int, opaque: int) -> None:
    h = PullMessageRequestHeader(consumerGroup="g", topic=topic, queueId=0, queueOffset=offset, maxMsgNums=32,
                                 sysFlag=2 | 4, commitOffset=0, suspendTimeoutMillis=20_000, subVersion=0,
                                 subscription="*")
    cmd = request(RequestCode.PULL_MESSAGE, h)
    cmd.opaque = opaque
    d.send(cmd)
    # the pull is parked: the same connection still answers a request sent after it
    r = d.invoke(request(RequestCode.GET_MAX_OFFSET, topic=topic, queueId=0))
    assert r.code == 0 and int(r.ext_fields["offset"]) == offset


def _answer(d: SyncRemotingClient, opaque: int) -> list[bytes]:
    resp = d.receive(10)
    assert resp.opaque == opaque and resp.code == 0, (resp.code, resp.remark)
    return [bytes(m.body) for m in iter_records(resp.body)]


def _batch(c, topic: str, bodies: list[bytes]):
    h = SendMessageRequestHeader(producerGroup="pg", topic=topic, defaultTopic="TBW102", defaultTopicQueueNums=4,
                                 queueId=0, sysFlag=0, bornTimestamp=0, flag=0, properties="", batch=True)
    body = encode_batch([BatchEntry(b, f"UNIQ_KEY\x01K{i}") for i, b in enumerate(bodies)])
    r = c.invoke(request(RequestCode.SEND_BATCH_MESSAGE, send_header_to_v2(h), body))
    assert r.code == 0, r.remark


def _every_append_answers(c: SyncRemotingClient, d: SyncRemotingClient, topic: str) -> None:
    create_topic(c, topic, queues=1)
    hb = {"clientID": "p1", "producerDataSet": [{"groupName": "txg"}]}
    assert c.invoke(request(RequestCode.HEART_BEAT, body=json.dumps(hb).encode())).code == 0
    _park(d, topic, 0, 71)
    assert send(c, topic, b"one").code == 0
    assert _answer(d, 71) == [b"one"]
    _park(d, topic, 1, 72)
    _batch(c, topic, [b"two", b"three"])
    assert _answer(d, 72) == [b"two", b"three"]
    half = _half(c, topic, b"four")  # invisible until its commit re-puts it
    _park(d, topic, 3, 73)
    assert _end(c, half.ext_fields["msgId"], half.ext_fields["queueOffset"], 8).code == 0
    assert _answer(d, 73) == [b"four"]


def test_held_pulls_answered_by_appends_on_their_own_worker(start_broker):
    br = start_broker(workers=2)
    c, d = _same_worker(br.addr)
    try:
        _every_append_answers(c, d, "LPSame")
    finally:
        c.close()
        d.close()


def test_held_pulls_answered_by_appends_on_another_worker(start_broker):
    br = start_broker(workers=2)
    c, d = clients_on_two_workers(br.addr)
    try:
        _every_append_answers(c, d, "LPOther")
    finally:
        c.close()
        d.close()


def _send_cmd(topic: str, body: bytes, opaque: int):
    h = SendMessageRequestHeader(producerGroup="pg", topic=topic, defaultTopic="TBW102", defaultTopicQueueNums=4,
                                 queueId=0, sysFlag=0, bornTimestamp=0, flag=0, properties=None)
    cmd = request(RequestCode.SEND_MESSAGE_V2, send_header_to_v2(h), body)
    cmd.opaque = opaque
    return cmd


def test_a_c_served_send_answers_itself_then_the_pull_it_satisfied_in_one_read(start_broker):
    """The C send path (a queue the worker served before) answers the held pulls its sends
    satisfied in the same read, right after the sends' own answers: on another connection of
    the worker, and on the send's own connection, where the send's answer comes first."""
    br = start_broker(workers=2)
    c, d = _same_worker(br.addr)
    try:
        create_topic(c, "LPFast", queues=1)
        assert send(c, "LPFast", b"warm").code == 0  # the Python path learns the queue for C
        for i in range(3):  # another connection of the same worker holds the pull
            _park(d, "LPFast", 1 + i, 90 + i)
            assert send(c, "LPFast", b"m%d" % i).code == 0
            assert _answer(d, 90 + i) == [b"m%d" % i]
        # the same connection holds the pull and sends: two answers, the send's first
        _park(c, "LPFast", 4, 95)
        c.send(_send_cmd("LPFast", b"own", 96))
        first, second = c.receive(10), c.receive(10)
        assert (first.opaque, first.code, second.opaque, second.code) == (96, 0, 95, 0)
        assert [bytes(m.body) for m in iter_records(second.body)] == [b"own"]
    finally:
        c.close()
        d.close()
