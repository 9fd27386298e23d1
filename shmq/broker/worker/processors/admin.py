"""Topic administration, message queries, runtime info, attach info and refusals:
UPDATE_AND_CREATE_TOPIC (17), DELETE_TOPIC_IN_BROKER (215), GET_ALL_TOPIC_CONFIG (21),
QUERY_MESSAGE (12), VIEW_MESSAGE_BY_ID (33), GET_BROKER_RUNTIME_INFO (28),
INVOKE_BROKER_TO_RESET_OFFSET (222), shmq's
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
from shmq.protocol.bodies import KVTable, TopicConfig, encode_json, encode_reset_offset_body
from shmq.protocol.headers import CreateTopicRequestHeader, QueryMessageRequestHeader, ViewMessageRequestHeader
from shmq.store import validate

from shmq.broker.shared import control_channel as cc
from shmq.broker.shared.control_channel import SHMQ_GET_ATTACH_INFO, Ctl
from ..context import WorkerContext
from .send import _topic_name_error

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
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
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
        if h.topic in validate.SYSTEM_TOPICS or h.topic == self.cfg.brokerClusterName:
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
        await self.w.ctl_call(cc.ctl(Ctl.DELETE_TOPIC, topic=topic))
        self.w.topics.table.pop(topic, None)
        return cmd.make_response()

    def all_topics(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(body=self.w.topics.encode())

    async def reset_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """INVOKE_BROKER_TO_RESET_OFFSET (222, Broker2Client.resetOffset): move a group's offsets
        on every queue of a topic to the first message stored at or after ``timestamp`` (-1:
        the end), commit them, and tell the group's consumers (RESET_CONSUMER_CLIENT_OFFSET on
        each one's own connection). Without ``isForce`` an offset only moves backwards."""
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
            target = store.max_offset(topic, q) if ts == -1 else store.offset_by_time(topic, q, ts)
            offset = target if force or target < current else current
            store.commit_offset(group, topic, q, offset)
            table[(topic, self.cfg.brokerName, q)] = offset
        body = encode_reset_offset_body(table)
        note = request(RequestCode.RESET_CONSUMER_CLIENT_OFFSET, None, body, topic=topic, group=group,
                       timestamp=ts, isForce=force)
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

    # ---- runtime ------------------------------------------------------------------------------
    def runtime_info(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        store = self.w.store
        now = int(time.time() * 1000)
        up = max(0, now - self.w.boot_ms) // 1000
        table = {
            "brokerVersionDesc": "V4_9_8",
            "brokerVersion": "409",
            "brokerName": self.cfg.brokerName,
            "brokerRole": self.cfg.brokerRole,
            "flushDiskType": self.cfg.flushDiskType,
            "bootTimestamp": str(self.w.boot_ms),
            "runtime": f"[ {up // 86400} days, {up // 3600 % 24} hours, {up // 60 % 60} minutes, {up % 60} seconds ]",
            "commitLogMinOffset": str(store.cb.min_pos),
            "commitLogMaxOffset": str(store.commit_pos),
            "commitLogFlushedOffset": str(store.flushed_pos),
            "msgPutTotalTodayNow": str(self.w.stats["put"]),
            "msgGetTotalTodayNow": str(self.w.stats["get"]),
            "topicCount": str(len(self.w.topics.table)),
            "shmqWorkers": str(self.cfg.worker_count),
            "shmqWorkerId": str(self.w.wid),
            "shmqWorkerPid": str(os.getpid()),
            "shmqPullHolds": str(len(self.w.holds) if self.w.holds else 0),
            "shmqHaListenPort": str(self.cfg.ha_port if not self.cfg.is_slave else 0),
        }
        return cmd.make_response(body=encode_json(KVTable(table=table)))

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
