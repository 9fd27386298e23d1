"""The ACL check every request of a worker passes when ``aclEnable=true``, before its handler.

Which resources a request names, and the permission each needs, follows RocketMQ 4.x
``PlainAccessValidator.parse`` exactly (shmq neither adds nor drops a check, so an account
works the same against either broker); codes not listed name no resource and need only a
valid account (RocketMQ's gap: SEND_BATCH_MESSAGE is one of them):

=============================  ===============================================================
request                        resources
=============================  ===============================================================
SEND_MESSAGE (10)              ``topic`` PUB; a ``%RETRY%`` topic: %RETRY%+``group`` SUB
SEND_MESSAGE_V2 (310)          the same from ``b`` (topic) and ``a`` (producer group)
CONSUMER_SEND_MSG_BACK (36)    %RETRY%+``group`` SUB
PULL_MESSAGE (11)              ``topic`` SUB, %RETRY%+``consumerGroup`` SUB
QUERY_MESSAGE (12)             ``topic`` SUB
HEART_BEAT (34)                every consumer's %RETRY%+group SUB and subscribed topic SUB
UNREGISTER_CLIENT (35)         %RETRY%+``consumerGroup`` SUB
GET_CONSUMER_LIST_BY_GROUP     %RETRY%+``consumerGroup`` SUB
UPDATE_CONSUMER_OFFSET (15)    %RETRY%+``consumerGroup`` SUB, ``topic`` SUB
=============================  ===============================================================

A refusal is answered as RocketMQ 4.9.8's remoting layer answers an AclException thrown by
its RPC hook (NettyRemotingAbstract.processRequestCommand): code SYSTEM_ERROR (1), remark
``org.apache.rocketmq.acl.common.AclException: <message>``; a oneway request gets nothing.
"""
from __future__ import annotations

import inspect
import logging

from shmq.broker.shared.acl import PUB, SUB, AclError, PlainAcl
from shmq.message.names import RETRY_PREFIX, retry_topic
from shmq.protocol import RemotingCommand, RequestCode, ResponseCode
from shmq.protocol.bodies import decode_heartbeat
from shmq.protocol.transport import Handler

log = logging.getLogger("shmq.broker.acl")

REMARK_PREFIX = "org.apache.rocketmq.acl.common.AclException: "


def _group(group: str | None) -> str | None:
    """A group's ACL resource is its retry topic; None where the request names no group."""
    return None if group is None else retry_topic(group)


def _send(topic, group):
    if topic is not None and topic.startswith(RETRY_PREFIX):
        return {_group(group): SUB}
    return {topic: PUB}


def _heartbeat(body) -> dict:
    hb = decode_heartbeat(bytes(body))
    out = {}
    for cd in hb.consumerDataSet:
        out[_group(cd.groupName)] = SUB
        for sd in cd.subscriptionDataSet:
            out[sd.topic] = SUB
    return out


_PARSERS = {
    RequestCode.SEND_MESSAGE: lambda e, b: _send(e.get("topic"), e.get("group")),
    RequestCode.SEND_MESSAGE_V2: lambda e, b: _send(e.get("b"), e.get("a")),
    RequestCode.CONSUMER_SEND_MSG_BACK: lambda e, b: {_group(e.get("group")): SUB},
    RequestCode.PULL_MESSAGE: lambda e, b: {e.get("topic"): SUB, _group(e.get("consumerGroup")): SUB},
    RequestCode.QUERY_MESSAGE: lambda e, b: {e.get("topic"): SUB},
    RequestCode.HEART_BEAT: lambda e, b: _heartbeat(b),
    RequestCode.UNREGISTER_CLIENT: lambda e, b: {_group(e.get("consumerGroup")): SUB},
    RequestCode.GET_CONSUMER_LIST_BY_GROUP: lambda e, b: {_group(e.get("consumerGroup")): SUB},
    RequestCode.UPDATE_CONSUMER_OFFSET: lambda e, b: {_group(e.get("consumerGroup")): SUB, e.get("topic"): SUB},
}


def resources(cmd: RemotingCommand) -> dict[str, int] | None:
    parse = _PARSERS.get(cmd.code)
    if parse is None:
        return None
    try:
        found = parse(cmd.ext_fields, cmd.body)
    except Exception as e:  # noqa: BLE001 - RocketMQ wraps whatever the parse threw
        raise AclError(str(e)) from None
    found.pop(None, None)  # addResourceAndPerm ignores a null resource (a header field absent)
    return found


def peer_host(peer: str) -> str:
    return peer.rpartition(":")[0].strip("[]") if ":" in peer else peer


def check(acl: PlainAcl, conn, cmd: RemotingCommand) -> RemotingCommand | None:
    """None when ``cmd`` may be served, else the answer refusing it."""
    try:
        acl.validate(peer_host(conn.peer), cmd.code, cmd.ext_fields, cmd.body, resources(cmd))
        return None
    except AclError as e:
        log.info("request code %d from %s refused by the ACL: %s", cmd.code, conn.peer, e)
        return cmd.make_response(ResponseCode.SYSTEM_ERROR, REMARK_PREFIX + str(e))


def guard(acl: PlainAcl, handler: Handler) -> Handler:
    """``handler`` behind the ACL check. A plain handler stays plain (answered inline) and a
    coroutine one stays a coroutine, so the transport serves both as before."""
    if inspect.iscoroutinefunction(handler):
        async def guarded_async(conn, cmd):
            refused = check(acl, conn, cmd)
            return refused if refused is not None else await handler(conn, cmd)
        return guarded_async

    def guarded(conn, cmd):
        refused = check(acl, conn, cmd)
        return refused if refused is not None else handler(conn, cmd)
    return guarded
