"""Topic administration, message queries, runtime info, attach info and refusals:
UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33), INVOKE_BROKER_TO_RESET_OFFSET (222), shmq's
GET_ATTACH_INFO (9900), and the config-changing requests, which are refused (safe by default:
the door of CVE-2023-33246 stays shut; shmq has no setting that opens it).

Topic changes go to the supervisor, the single writer of topics.json, which pushes the new
table to every worker and re-registers with the NameServers.
"""
from __future__ import annotations

import os
import time

from shmq.message.names import PERM_INHERIT, PERM_RW
from shmq.protocol import RemotingCommand, RequestCode, ResponseCode, encode_command, request
from shmq.protocol.bodies import TopicConfig, encode_reset_offset_body
from shmq.protocol.admin_bodies import encode_reset_offset_body_for_c
from shmq.protocol.codes import LanguageCode
from shmq.protocol.headers import CreateTopicRequestHeader, QueryMessageRequestHeader, ViewMessageRequestHeader

from shmq.broker.shared import control_channel as cc
from shmq.broker.shared.control_channel import SHMQ_GET_ATTACH_INFO, Ctl
from ..context import WorkerContext
from .send import _topic_name_error

#: TopicValidator's system topics (4.9.8), which mqadmin may neither create nor delete; the
#: broker adds its cluster's and its own name and the cluster's reply topic (TopicConfigManager).
SYSTEM_TOPICS = frozenset({
    "TBW102", "SCHEDULE_TOPIC_XXXX", "BenchmarkTest", "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRACE_TOPIC",
    "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC", "SELF_TEST_TOPIC", "OFFSET_MOVED_EVENT",
})


def is_system_topic(topic: str, cfg) -> bool:
    return (topic in SYSTEM_TOPICS or topic.startswith("rmq_sys_")
            or topic in (cfg.brokerClusterName, cfg.brokerName, f"{cfg.brokerClusterName}_REPLY_TOPIC"))


#: Requests that change broker or ACL configuration: refused, whatever the caller.
REFUSED = (
    RequestCode.UPDATE_BROKER_CONFIG,
    RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
    RequestCode.DELETE_ACL_CONFIG,
    RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
    RequestCode.UPDATE_NAMESRV_CONFIG,
)


class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker
        self.cfg = worker.cfg

    def handlers(self):
        h = {
            RequestCode.UPDATE_AND_CREATE_TOPIC: self.create_topic,
            RequestCode.DELETE_TOPIC_IN_BROKER: self.delete_topic,
            RequestCode.GET_ALL_TOPIC_CONFIG: self.all_topics,
            RequestCode.QUERY_MESSAGE: self.query_message,
            RequestCode.VIEW_MESSAGE_BY_ID: self.view_message,
            SHMQ_GET_ATTACH_INFO: self.attach_info,
            RequestCode.INVOKE_BROKER_TO_RESET_OFFSET: self.reset_offset,
        }
        for code in REFUSED:
            h[code] = self.refuse
        return h

    # ---- topics -------------------------------------------------------------------------------
    async def create_topic(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = CreateTopicRequestHeader.from_ext(cmd.ext_fields)
        why = _topic_name_error(h.topic)
        if why is not None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, why)
        if is_system_topic(h.topic, self.cfg):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"The topic[{h.topic}] is conflict with system topic.")
        if h.readQueueNums < 0 or h.writeQueueNums < 0 or max(h.readQueueNums, h.writeQueueNums) > 1024:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"queue numbers read {h.readQueueNums} write {h.writeQueueNums} out of range 0..1024")
        tc = TopicConfig(topicName=h.topic, readQueueNums=h.readQueueNums, writeQueueNums=h.writeQueueNums,
                         perm=h.perm & (PERM_RW | PERM_INHERIT),
                         topicFilterType=h.topicFilterType or "SINGLE_TAG",
                         topicSysFlag=h.topicSysFlag or 0, order=h.order)
        await self.w.create_topic(tc)
        return cmd.make_response()

    async def delete_topic(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic")
        if not topic:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "the custom field <topic> is null")
        why = _topic_name_error(topic)
        if why is not None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, why)
        if is_system_topic(topic, self.cfg):
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"The topic[{topic}] is conflict with system topic.")
        await self.w.ctl_call(cc.ctl(Ctl.DELETE_TOPIC, topic=topic))
        self.w.topics.table.pop(topic, None)
        return cmd.make_response()

    def all_topics(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(body=self.w.topics.encode())

    async def reset_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (222), RocketMQ's Broker2Client.resetOffset: work out
        each queue's target (the first message stored at or after ``timestamp``, -1: the end;
        without ``isForce`` an offset only moves backwards) and tell the group's consumers
        (RESET_CONSUMER_CLIENT_OFFSET on each one's own connection; a C++ caller's table is a
        ResetOffsetBodyForC list). The broker commits nothing itself: the consumers do when
        told. With nobody online the answer is CONSUMER_NOT_ONLINE, on which mqadmin falls
        back to committing the offsets itself (UPDATE_CONSUMER_OFFSET)."""
        e = cmd.ext_fields
        topic, group = e.get("topic"), e.get("group")
        if not topic or not group or "timestamp" not in e:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "the custom fields <topic>, <group>, <timestamp> are required")
        ts = int(e["timestamp"])
        force = e.get("isForce", "true").lower() == "true"
        tc = self.w.topics.get(topic) or await self.w.fetch_topic(topic)
        if tc is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"[reset-offset] reset offset failed, no topic in this broker. topic={topic}")
        store = self.w.store
        table: dict[tuple[str, str, int], int] = {}
        for q in range(tc.writeQueueNums):
            current = store.query_offset(group, topic, q)
            if current == -1:
                return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"THe consumer group <{group}> not exist")
            target = store.max_offset(topic, q) if ts == -1 else max(0, store.offset_by_time(topic, q, ts))
            table[(topic, self.cfg.brokerName, q)] = target if force or target < current else current
        body = encode_reset_offset_body(table)
        for_c = str(cmd.language).upper() in ("CPP", str(int(LanguageCode.CPP)))
        note = request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, None,
                       encode_reset_offset_body_for_c(table) if for_c else body,
                       topic=topic, group=group, timestamp=ts, isForce=force)
        resp = await self.w.ctl_call(cc.ctl(Ctl.FORWARD_TO_GROUP, encode_command(note)[4:], group=group,
                                            kind="consumer"))
        if int(resp.ext_fields.get("count", "0")) == 0:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE,
                                     f"Consumer not online, so can not reset offset, Group: {group} Topic: {topic} "
                                     f"Timestamp: {ts}")
        return cmd.make_response(body=body)

    # ---- messages -----------------------------------------------------------------------------
    def query_message(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryMessageRequestHeader.from_ext(cmd.ext_fields)
        store = self.w.store
        max_num = max(1, min(h.maxNum, 64))
        if cmd.ext_fields.get("_UNIQUE_KEY_QUERY", "").lower() == "true":
            max_num = 32  # RocketMQ's defaultQueryMaxNum for a unique-key lookup
        recs = store.query_by_key(h.topic, h.key, max_num, h.beginTimestamp, h.endTimestamp)
        ext = {"indexLastUpdateTimestamp": str(int(time.time() * 1000)),
               "indexLastUpdatePhyoffset": str(store.index_flushed_upto())}
        if not recs:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND,
                                     "can not find message, maybe time range not correct", ext)
        return cmd.make_response(ResponseCode.SUCCESS, None, ext, b"".join(recs))

    def view_message(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = ViewMessageRequestHeader.from_ext(cmd.ext_fields)
        rec = self.w.store.read_at(h.offset) if h.offset >= 0 else None
        if rec is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"can not find message by the offset, {h.offset}")
        return cmd.make_response(body=bytes(rec))

    # ---- attach ---------------------------------------------------------------------------
    def attach_info(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """The local transport's attach: what a local client needs to map the store (its root, the generation
        of the running owner, the flush mode it must honour), given only to a caller on this
        host that proves it can read the store's key (:mod:`shmq.protocol.attach`)."""
        ok, answer = self.w.attach_guard.check(conn.context, conn.peer, cmd.ext_fields)
        if not ok:
            return cmd.make_response(ResponseCode.NO_PERMISSION, answer)
        if answer:
            return cmd.make_response(ext_fields=answer)
        store = self.w.store
        ext = {
            "storeRoot": self.cfg.store_root,
            "generation": str(store.cb.generation),
            "flushDiskType": self.cfg.flushDiskType,
            "brokerName": self.cfg.brokerName,
            "brokerAddr": self.cfg.broker_addr,
            "storeHost": f"{self.cfg.brokerIP1}:{self.cfg.listenPort}",
            "maxMessageSize": str(self.cfg.maxMessageSize),
            # what a local producer's put pipeline needs to store a message as this broker would
            "clusterName": self.cfg.brokerClusterName,
            "messageDelayLevel": self.cfg.messageDelayLevel,
            "maxReconsumeTimes": str(self.cfg.maxReconsumeTimes),
            "timerWheelEnable": str(self.cfg.timerWheelEnable).lower(),
            "timerMaxDelaySec": str(self.cfg.timerMaxDelaySec),
            "timerPrecisionMs": str(self.cfg.timerPrecisionMs),
            "uid": str(os.getuid()),
        }
        return cmd.make_response(ext_fields=ext)

    def refuse(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(ResponseCode.NO_PERMISSION,
                                 f"request code {cmd.code} changes broker configuration and is disabled in shmq")
