"""RocketMQ 4.x remoting: frames, commands, codes, headers, bodies, and an asyncio server/client.

Layering: imports nothing of shmq but :mod:`shmq.errors`. The codecs (:mod:`command`,
:mod:`frame`, :mod:`headers`, :mod:`bodies`, :mod:`message`) are pure functions without I/O;
:mod:`transport`, :mod:`server` and :mod:`client` put them on asyncio sockets.
"""
from shmq.protocol.client import RemotingClient, SyncRemotingClient, parse_addr
from shmq.protocol.codes import (
    FLAG_ONEWAY,
    FLAG_RESPONSE,
    MASTER_ID,
    SHMQ_VERSION,
    LanguageCode,
    Perm,
    RequestCode,
    ResponseCode,
    SerializeType,
    Version,
)
from shmq.protocol.command import RemotingCommand, decode_command, encode_command, request
from shmq.protocol.frame import DEFAULT_MAX_FRAME_SIZE, FrameDecoder
from shmq.protocol.server import RemotingServer
from shmq.protocol.transport import Connection, Handler

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "FLAG_ONEWAY",
    "FLAG_RESPONSE",
    "MASTER_ID",
    "SHMQ_VERSION",
    "Connection",
    "FrameDecoder",
    "Handler",
    "LanguageCode",
    "Perm",
    "RemotingClient",
    "RemotingCommand",
    "RemotingServer",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "SyncRemotingClient",
    "Version",
    "decode_command",
    "encode_command",
    "parse_addr",
    "request",
]
