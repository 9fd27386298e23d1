"""A send's SUCCESS answer header (SendMessageResponseHeader) as this broker writes it, defined
once: its extFields (``send_ext``, both of the worker's paths) and the encoded header cut at its
four per-send values (``answer_pieces``): the worker's C path (native/remoting_send.c) writes
those values between the pieces, and the client's answer reader (native/remote_answer.c)
matches an answer against the same pieces before it scans one generically.
"""
from __future__ import annotations

from .codes import RequestCode, ResponseCode
from .command import RemotingCommand, encode_header

# stand-ins cut out of an encoded answer (remoting_send.c's A_* order)
_MSGID, _QID, _QOFF, _OPAQUE = "@shmq-msgId@", "@shmq-queueId@", "@shmq-queueOffset@", 987654321987654


def send_ext(msg_id: str, qid: int, queue_offset: int) -> dict[str, str]:
    """The extFields of a send's SUCCESS answer (SendMessageResponseHeader), for both paths."""
    return {"msgId": msg_id, "queueId": str(qid), "queueOffset": str(queue_offset),
            "MSG_REGION": "DefaultRegion", "TRACE_ON": "true"}


def answer_pieces() -> tuple[bytes, ...]:
    """The JSON header of a send's SUCCESS answer as shmq.protocol.command encodes it, cut at the
    msgId, queue id, queue offset and opaque: 5 literal pieces around those 4 values."""
    resp = RemotingCommand(code=RequestCode.SEND_MESSAGE_V2).make_response(
        ResponseCode.SUCCESS, None, send_ext(_MSGID, 0, 0))
    resp.ext_fields["queueId"], resp.ext_fields["queueOffset"], resp.opaque = _QID, _QOFF, _OPAQUE
    text = encode_header(resp)
    pieces, pos = [], 0
    for mark in (_MSGID.encode(), _QID.encode(), _QOFF.encode(), str(_OPAQUE).encode()):
        at = text.index(mark, pos)  # in this order, or the C path's order is wrong: fail loudly
        pieces.append(text[pos:at])
        pos = at + len(mark)
    pieces.append(text[pos:])
    return tuple(pieces)
