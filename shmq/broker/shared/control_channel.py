"""The supervisor <-> worker control channel: RocketMQ remoting over a unix socket.

Why this shape: the control plane is request/response in both directions (a worker asks
"register this heartbeat"; the supervisor tells a worker "send NOTIFY_CONSUMER_IDS_CHANGED
on channel 1:17"), requests must be served concurrently, and the broker already has a
tested, bounded, multiplexing codec for exactly that. So the channel is the same
:class:`~shmq.protocol.transport.Connection` over ``AF_UNIX`` (``<store>/broker.sock``,
mode 0600: only the broker's user can speak on it), with shmq-private request codes
(:class:`Ctl`, 9901+) that never travel on a client socket: a worker's TCP server has no
handler for them, so a client sending one gets REQUEST_CODE_NOT_SUPPORTED.

One connection per worker, opened by the worker at start (``HELLO`` with its worker id and
pid; the answer carries the topic table). When it closes, the supervisor treats the worker
as gone (its client channels are dropped and their groups notified); when the supervisor's
end closes, the worker shuts down (an orphan must not keep serving).

Data (extFields for scalars, JSON bodies for structures):

=====================  ===========  ================================================================
code                   direction    meaning
=====================  ===========  ================================================================
HELLO                  w -> s       ext worker, pid; answer body = topics.json
READY                  w -> s       the worker listens; ext port, vipPort
GET_TOPIC              w -> s       ext topic; body TopicConfig or code 17
CREATE_TOPIC           w -> s       body TopicConfig (create or update; ext ifAbsent=true: keep an existing one)
AUTO_CREATE_TOPIC      w -> s       ext topic, defaultTopic, queueNums, sysFlag; body the new config or 17
DELETE_TOPIC           w -> s       ext topic
HEARTBEAT              w -> s       ext chan, addr, language, version; body HeartbeatData
UNREGISTER             w -> s       ext chan, clientID, [producerGroup], [consumerGroup]
CHANNEL_CLOSED         w -> s       ext chan (the client connection closed)
CONSUMER_LIST          w -> s       ext group; body {"consumerIdList": [...]}
SUBSCRIPTION           w -> s       ext group, topic; body SubscriptionData or code 24
LOCK / UNLOCK          w -> s       body LockBatchRequestBody; LOCK answers LockBatchResponseBody
FORWARD_TO_GROUP       w -> s       ext group, kind (consumer|producer), one (true: one live channel);
                                    body a remoting frame; answer ext count (channels it went to)
CONNECTIONS            w -> s       ext group, kind: a group's connections (supervisor/admin_plane.py)
GROUPS_OF_TOPIC        w -> s       ext topic: {"groupList": [...]} of the groups subscribing to it
CALL_CLIENT            w -> s       ext clientId, [group], timeout; body a frame: the client's answer
SUBGROUP               w -> s       ext op (update|delete|all), [group]; body config; answer the table
METRICS                w -> s       oneway; body the worker's cumulative metric counts (JSON, broker/worker/metrics.py)
POP_RESERVE/ACK/CHANGE w -> s       POP state (supervisor/pop_service.py documents the fields)
MODE_GET / MODE_SET    w -> s       SET_MESSAGE_REQUEST_MODE's table (pop_service.py)
TOPICS_CHANGED         s -> w       body topics.json (whole table: idempotent, order-free); oneway, or a
                                    request after an admin's create/update/delete (answered once taken)
NOTIFY_IDS_CHANGED     s -> w       ext group, chans (comma list): send code 40 on each
CLOSE_CHANNEL          s -> w       ext chans: close those client connections (expired)
FORWARD                s -> w       ext chans; body a remoting frame (no length word): send it oneway
                                    on each (RESET_CONSUMER_CLIENT_OFFSET, CHECK_TRANSACTION_STATE)
CALL                   s -> w       ext chan, timeout; body a frame: send it as a request on that
                                    channel and answer with the client's response frame as body
=====================  ===========  ================================================================
"""
from __future__ import annotations

import asyncio
import enum
import os
from collections.abc import Callable, Mapping
from typing import Any

from shmq.errors import BrokerError
from shmq.protocol import RemotingCommand, request
from shmq.protocol.codes import SHMQ_GET_ATTACH_INFO  # noqa: F401  (re-exported for the processors)
from shmq.protocol.transport import Connection, Handler, Limits



class Ctl(enum.IntEnum):
    HELLO = 9901
    READY = 9902
    GET_TOPIC = 9903
    CREATE_TOPIC = 9904
    AUTO_CREATE_TOPIC = 9905
    DELETE_TOPIC = 9906
    HEARTBEAT = 9907
    UNREGISTER = 9908
    CHANNEL_CLOSED = 9909
    CONSUMER_LIST = 9910
    SUBSCRIPTION = 9911
    LOCK = 9912
    UNLOCK = 9913
    FORWARD_TO_GROUP = 9914
    CONNECTIONS = 9915
    GROUPS_OF_TOPIC = 9916
    CALL_CLIENT = 9917
    SUBGROUP = 9918
    METRICS = 9919
    POP_RESERVE = 9920      # POP: see supervisor/pop_service.py
    POP_ACK = 9921
    POP_CHANGE = 9922
    MODE_GET = 9923
    MODE_SET = 9924
    TOPICS_CHANGED = 9951
    NOTIFY_IDS_CHANGED = 9952
    CLOSE_CHANNEL = 9953
    FORWARD = 9954
    CALL = 9955


def _limits() -> Limits:
    # Local and trusted, but still bounded: one peer, no idle close (a quiet broker is fine).
    return Limits(max_frame_size=64 * 1024 * 1024, max_inflight=4096, idle_timeout=None, frame_timeout=30.0)


async def serve(path: str, handlers: Mapping[int, Handler],
                on_connect: Callable[[Connection], Any], on_close: Callable[[Connection], Any]) -> asyncio.AbstractServer:
    """Supervisor side: listen on the unix socket ``path`` (replacing a stale one)."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    loop = asyncio.get_running_loop()

    def make() -> Connection:
        conn = Connection(handlers, _limits(), on_close=on_close, name="control")
        on_connect(conn)
        return conn

    old = os.umask(0o077)  # the socket file is created 0600 whatever the caller's umask
    try:
        return await loop.create_unix_server(make, path)
    finally:
        os.umask(old)


async def connect(path: str, handlers: Mapping[int, Handler], on_close: Callable[[Connection], Any],
                  timeout: float = 10.0) -> Connection:
    """Worker side: the one connection to the supervisor."""
    loop = asyncio.get_running_loop()
    _, conn = await asyncio.wait_for(
        loop.create_unix_connection(lambda: Connection(handlers, _limits(), on_close=on_close, name="control"), path),
        timeout)
    return conn


def ctl(code: int, body: bytes = b"", **ext: Any) -> RemotingCommand:
    return request(code, None, body, **{k: v for k, v in ext.items() if v is not None})


async def call(conn: Connection, cmd: RemotingCommand, timeout: float = 10.0,
               ok: tuple[int, ...] = (0,)) -> RemotingCommand:
    """Send a control request; a code outside ``ok`` raises BrokerError with the remark."""
    resp = await conn.send_request(cmd, timeout)
    if resp.code not in ok:
        raise BrokerError(resp.code, resp.remark)
    return resp
