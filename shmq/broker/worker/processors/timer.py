"""RECALL_MESSAGE (370): take back a timer message before it is due (RocketMQ 5.3's
RecallMessageProcessor). The checks and the marker are shmq.store.recall's, shared with the
local client; this module only maps the request onto them.

Request extFields (RecallMessageRequestHeader): topic, recallHandle, producerGroup (optional).
Answer: SUCCESS with extFields msgId (the recalled message's UNIQ_KEY); NO_PERMISSION when the
broker is not writable; TOPIC_NOT_EXIST for an unknown topic; ILLEGAL_OPERATION (604) for a
bad handle, a handle of another topic or broker, or a time no longer ahead.
"""
from __future__ import annotations

from shmq.protocol import RemotingCommand, RequestCode, ResponseCode
from shmq.protocol.codes import Perm
from shmq.store import recall

from ..context import WorkerContext


class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker
        self.cfg = worker.cfg

    def handlers(self):
        return {RequestCode.RECALL_MESSAGE: self.recall}

    async def recall(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        ext = cmd.ext_fields or {}
        topic, handle = ext.get("topic") or "", ext.get("recallHandle") or ""
        if not self.cfg.brokerPermission & int(Perm.WRITE):
            return cmd.make_response(ResponseCode.SERVICE_NOT_AVAILABLE, "recall failed, broker service not available")
        if not topic or await self.w.fetch_topic(topic) is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"recall failed, the topic[{topic}] not exist")
        msg_id = recall.recall(self.w.pipeline, topic, handle, self.cfg.brokerName, ext.get("producerGroup"))
        self.w.holds.appended()
        return cmd.make_response(ResponseCode.SUCCESS, None, {"msgId": msg_id, "MSG_REGION": "DefaultRegion"})
