"""RocketMQ 5's POP family on the wire: POP_MESSAGE (200050), PEEK_MESSAGE (200052),
ACK_MESSAGE (200051), BATCH_ACK_MESSAGE (200151), CHANGE_MESSAGE_INVISIBLETIME (200053),
NOTIFICATION (200054), POLLING_INFO (200055), QUERY_ASSIGNMENT (400),
SET_MESSAGE_REQUEST_MODE (401). Headers and bodies are RocketMQ 5.3's (PopMessageRequestHeader
and PopMessageResponseHeader, AckMessageRequestHeader, ChangeInvisibleTime*Header,
BatchAckMessageRequestBody, QueryAssignment*Body, SetMessageRequestModeRequestBody); the
extraInfo texts are shmq.protocol.pop_info's.

Which messages a POP gets, acks and invisible times are decided by the supervisor
(supervisor/pop_service.py) for every worker alike; this module reads the chosen records
from the store and answers. A POP answer's body is the stored records as they are (retry
messages keep their %RETRY% topic: the client derives the retry mark from it and then shows
the requested topic, RocketMQ's popResponseReturnActualRetryTopic=true); its header always
carries popTime, invisibleTime, reviveQid and restNum, which clients decode even from a
"not found". A POP that finds nothing waits up to its pollTime, looking again with a growing
pause (10 ms to 200 ms).
"""
from __future__ import annotations

import asyncio
import json
import time

from shmq.broker.shared import control_channel as cc
from shmq.broker.shared.control_channel import Ctl
from shmq.protocol import RemotingCommand, RequestCode, ResponseCode
from shmq.protocol import pop_info as pi

from ..context import WorkerContext
from .pull import tag_codes_of

_ZERO = {"popTime": "0", "invisibleTime": "0", "reviveQid": "0", "restNum": "0"}
MAX_POLL_MS = 30_000


def _int(e: dict, name: str, default: int | None = None) -> int:
    v = e.get(name)
    if v is None or v == "":
        if default is None:
            raise ValueError(f"the custom field <{name}> is null")
        return default
    return int(v)


class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker
        self.cfg = worker.cfg

    def handlers(self):
        return {RequestCode.POP_MESSAGE: self.pop, RequestCode.PEEK_MESSAGE: self.peek,
                RequestCode.ACK_MESSAGE: self.ack, RequestCode.BATCH_ACK_MESSAGE: self.batch_ack,
                RequestCode.CHANGE_MESSAGE_INVISIBLETIME: self.change, RequestCode.NOTIFICATION: self.notification,
                RequestCode.POLLING_INFO: self.polling_info, RequestCode.QUERY_ASSIGNMENT: self.query_assignment,
                RequestCode.SET_MESSAGE_REQUEST_MODE: self.set_mode}

    # ---- POP / PEEK ----------------------------------------------------------------------
    async def _reserve(self, e: dict, *, peek: bool) -> dict:
        group, topic = e.get("consumerGroup") or "", e.get("topic") or ""
        if not group or not topic:
            raise ValueError("consumerGroup and topic are required")
        tags = tag_codes_of(e.get("exp")) if (e.get("expType") or "TAG").upper() == "TAG" else None
        cmd = cc.ctl(Ctl.POP_RESERVE, group=group, topic=topic, qid=_int(e, "queueId", -1),
                     max=_int(e, "maxMsgNums", 32), it=_int(e, "invisibleTime", 60_000),
                     order=str(e.get("order", "false")).lower(), init=_int(e, "initMode", 0),
                     tags=",".join(str(t) for t in sorted(tags)) if tags else "", peek=str(peek).lower())
        return json.loads((await self.w.ctl_call(cmd)).body)

    async def _poll(self, e: dict, *, peek: bool) -> dict:
        deadline = time.monotonic() + min(_int(e, "pollTime", 0), MAX_POLL_MS) / 1000.0
        pause = 0.01
        while True:
            got = await self._reserve(e, peek=peek)
            if got["picks"] or time.monotonic() + pause > deadline:
                return got
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.2)

    def _records(self, picks) -> tuple[bytes, list]:
        store, parts, found = self.w.store, [], []
        for topic, qid, start, offsets, counts in picks:
            cq = store.queues.get(topic, qid)
            kept = []
            for off in offsets:
                e = cq.entry(off)
                rec = store.read_at(e[0]) if e is not None else None
                if rec is not None:
                    parts.append(bytes(rec))
                    kept.append(off)
            found.append((topic, qid, start, kept, counts))
        return b"".join(parts), found

    async def pop(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields or {}
        try:
            got = await self._poll(e, peek=False)
        except ValueError as err:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(err), dict(_ZERO))
        body, found = self._records(got["picks"])
        ext = {"popTime": str(got["pt"]), "invisibleTime": str(got["it"]), "reviveQid": str(got["rq"]),
               "restNum": str(got["rest"])}
        if not body:
            return cmd.make_response(ResponseCode.POLLING_TIMEOUT if _int(e, "pollTime", 0) else
                                     ResponseCode.PULL_NOT_FOUND, "no new message", ext)
        ext["startOffsetInfo"] = pi.join_infos((pi.retry_mark(t), q, s) for t, q, s, _o, _c in found)
        ext["msgOffsetInfo"] = pi.join_infos((pi.retry_mark(t), q, ",".join(map(str, o)))
                                             for t, q, _s, o, _c in found if o)
        counts = [(pi.retry_mark(t), f"qo{q}%{o}", c) for t, q, _s, offs, cs in found
                  for o, c in zip(offs, cs) if c]
        if counts:
            ext["orderCountInfo"] = pi.join_infos(counts)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext, body)

    async def peek(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        try:
            got = await self._reserve(cmd.ext_fields or {}, peek=True)
        except ValueError as err:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(err), dict(_ZERO))
        body, _found = self._records(got["picks"])
        ext = {"popTime": "0", "invisibleTime": "0", "reviveQid": "0", "restNum": str(got["rest"])}
        if not body:
            return cmd.make_response(ResponseCode.PULL_NOT_FOUND, "no new message", ext)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext, body)

    async def notification(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """Whether a POP would find something now (long-polled like a POP)."""
        try:
            got = await self._poll(cmd.ext_fields or {}, peek=True)
        except ValueError as err:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, str(err), {"hasMsg": "false"})
        return cmd.make_response(ext_fields={"hasMsg": "true" if got["picks"] else "false"})

    def polling_info(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ext_fields={"pollingNum": "0"})

    # ---- ACK / change -------------------------------------------------------------------
    @staticmethod
    def _ck(e: dict) -> tuple[dict, int]:
        """The supervisor's CK key fields and the message offset of an ack-like header."""
        x = pi.ExtraInfo.parse(e.get("extraInfo", ""))
        group, topic = e.get("consumerGroup") or "", e.get("topic") or ""
        if not group or not topic:
            raise ValueError("consumerGroup and topic are required")
        stored = topic if topic.startswith(pi.RETRY_PREFIX) else pi.stored_topic(topic, group, x.retry)
        off = _int(e, "offset", x.msg_offset if x.msg_offset is not None else -1)
        return {"group": group, "topic": stored, "qid": _int(e, "queueId", x.queue_id), "s": x.ck_offset,
                "pt": x.pop_time}, off

    async def ack(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        try:
            key, off = self._ck(cmd.ext_fields or {})
        except ValueError as err:
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, str(err))
        await self.w.ctl_call(cc.ctl(Ctl.POP_ACK, offsets=str(off), **key))
        return cmd.make_response()

    async def batch_ack(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        try:
            acks = json.loads(cmd.body or b"{}").get("acks") or []
            for a in acks:
                group, topic = a.get("c") or a.get("consumerGroup"), a.get("t") or a.get("topic")
                mark = str(a.get("r", a.get("retry", "0")))
                start = int(a.get("so", a.get("startOffset", 0)))
                stored = topic if topic.startswith(pi.RETRY_PREFIX) else pi.stored_topic(topic, group, mark)
                offs = pi.bitset_offsets(a.get("b", a.get("bitSet", "")), start)
                await self.w.ctl_call(cc.ctl(Ctl.POP_ACK, group=group, topic=stored,
                                             qid=int(a.get("q", a.get("queueId"))), s=start,
                                             pt=int(a.get("pt", a.get("popTime"))),
                                             offsets=",".join(map(str, offs))))
        except (ValueError, TypeError, AttributeError) as err:
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, f"bad BATCH_ACK_MESSAGE body: {err}")
        return cmd.make_response()

    async def change(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields or {}
        zero = {"popTime": "0", "invisibleTime": "0", "reviveQid": "0"}
        try:
            key, off = self._ck(e)
            it = _int(e, "invisibleTime")
        except ValueError as err:
            return cmd.make_response(ResponseCode.MESSAGE_ILLEGAL, str(err), zero)
        r = await self.w.ctl_call(cc.ctl(Ctl.POP_CHANGE, offsets=str(off), it=it, **key), ok=(0, 17))
        if r.code != 0:
            return cmd.make_response(ResponseCode.NO_MESSAGE, r.remark, zero)
        return cmd.make_response(ext_fields={"popTime": r.ext_fields["pt"], "invisibleTime": r.ext_fields["it"],
                                             "reviveQid": r.ext_fields["rq"]})

    # ---- assignment (broker-side rebalance) ------------------------------------------------
    async def _mode(self, topic: str, group: str) -> dict:
        r = await self.w.ctl_call(cc.ctl(Ctl.MODE_GET, topic=topic, group=group), ok=(0, 24))
        if r.code == 0:
            return json.loads(r.body)
        mode = "PULL" if topic.startswith(pi.RETRY_PREFIX) else self.cfg.defaultMessageRequestMode
        return {"topic": topic, "consumerGroup": group, "mode": mode, "popShareQueueNum": self.cfg.defaultPopShareQueueNum}

    async def query_assignment(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        try:
            b = json.loads(cmd.body or b"{}")
            topic, group, cid = b["topic"], b["consumerGroup"], b.get("clientId") or ""
        except (ValueError, KeyError, TypeError) as err:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"bad QUERY_ASSIGNMENT body: {err}")
        tc = self.w.topics.get(topic) or await self.w.fetch_topic(topic)
        if tc is None:
            return cmd.make_response(body=json.dumps({"messageQueueAssignments": []}).encode())
        mode = await self._mode(topic, group)
        mqs = [{"topic": topic, "brokerName": self.cfg.brokerName, "queueId": q} for q in range(tc.readQueueNums)]
        if str(b.get("messageModel", "CLUSTERING")) != "BROADCASTING":
            r = await self.w.ctl_call(cc.ctl(Ctl.CONSUMER_LIST, group=group), ok=(0, 1))
            cids = sorted(json.loads(r.body).get("consumerIdList", [])) if r.code == 0 and r.body else [cid]
            mqs = allocate(mqs, cids, cid, mode)
        out = [{"messageQueue": mq, "mode": mode["mode"], "attachments": {}} for mq in mqs]
        return cmd.make_response(body=json.dumps({"messageQueueAssignments": out}).encode())

    async def set_mode(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        try:
            b = json.loads(cmd.body or b"{}")
            m = {"topic": b["topic"], "consumerGroup": b["consumerGroup"], "mode": str(b.get("mode", "PULL")).upper(),
                 "popShareQueueNum": int(b.get("popShareQueueNum", 0))}
            if m["mode"] not in ("PULL", "POP"):
                raise ValueError(f"mode {m['mode']!r}")
        except (ValueError, KeyError, TypeError) as err:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"bad SET_MESSAGE_REQUEST_MODE body: {err}")
        if m["topic"].startswith(pi.RETRY_PREFIX):
            return cmd.make_response(ResponseCode.NO_PERMISSION, "retry topic is not allowed to set mode")
        await self.w.ctl_call(cc.ctl(Ctl.MODE_SET, json.dumps(m).encode()))
        return cmd.make_response()


def allocate(mqs: list[dict], cids: list[str], cid: str, mode: dict) -> list[dict]:
    """QueryAssignmentProcessor.doLoadBalance with AllocateMessageQueueAveragely; in POP mode
    (allocate4Pop) every consumer gets every queue as queue id -1 when popShareQueueNum <= 0
    or covers the group."""
    if mode.get("mode") == "POP":
        share = int(mode.get("popShareQueueNum", 0))
        if share <= 0 or share >= len(cids) - 1:
            return [dict(mq, queueId=-1) for mq in mqs]
    if cid not in cids:
        return []
    i, n, m = cids.index(cid), len(cids), len(mqs)
    mod = m % n
    size = 1 if m <= n else (m // n + 1 if mod > 0 and i < mod else m // n)
    start = i * size if mod > 0 and i < mod else i * size + mod
    return [mqs[(start + k) % m] for k in range(min(size, m - start))]
