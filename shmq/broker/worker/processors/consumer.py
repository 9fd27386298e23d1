"""Offsets and client management: QUERY_CONSUMER_OFFSET (14), UPDATE_CONSUMER_OFFSET (15),
SEARCH_OFFSET_BY_TIMESTAMP (29), GET_MAX_OFFSET (30), GET_MIN_OFFSET (31),
GET_EARLIEST_MSG_STORETIME (32), HEART_BEAT (34), UNREGISTER_CLIENT (35),
GET_CONSUMER_LIST_BY_GROUP (38), LOCK_BATCH_MQ (41), UNLOCK_BATCH_MQ (42),
CHECK_CLIENT_CONFIG (46).

Offsets live in the store's shared-memory table, so every worker (and local clients) see a
commit at once; the supervisor persists them. Client registry and locks are the
supervisor's (control channel); the heartbeat's subscriptions are also remembered here so
this worker's pulls need no round trip.
"""
from __future__ import annotations

from shmq.broker.shared import control_channel as cc
from shmq.broker.shared.control_channel import Ctl
from shmq.errors import FilterExpressionError
from shmq.message import sql_filter
from shmq.protocol import RemotingCommand, RequestCode, ResponseCode
from shmq.protocol.bodies import ConsumerListBody, LockBatchRequestBody, decode_heartbeat, decode_json, encode_json
from shmq.protocol.headers import (GetConsumerListByGroupRequestHeader, GetEarliestMsgStoretimeRequestHeader,
                                   GetMaxOffsetRequestHeader, GetMinOffsetRequestHeader,
                                   QueryConsumerOffsetRequestHeader, SearchOffsetRequestHeader,
                                   UnregisterClientRequestHeader, UpdateConsumerOffsetRequestHeader)

from ..context import WorkerContext


class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker

    def handlers(self):
        return {
            RequestCode.QUERY_CONSUMER_OFFSET: self.query_offset,
            RequestCode.UPDATE_CONSUMER_OFFSET: self.update_offset,
            RequestCode.SEARCH_OFFSET_BY_TIMESTAMP: self.search_offset,
            RequestCode.GET_MAX_OFFSET: self.max_offset,
            RequestCode.GET_MIN_OFFSET: self.min_offset,
            RequestCode.GET_EARLIEST_MSG_STORETIME: self.earliest,
            RequestCode.HEART_BEAT: self.heartbeat,
            RequestCode.UNREGISTER_CLIENT: self.unregister,
            RequestCode.GET_CONSUMER_LIST_BY_GROUP: self.consumer_list,
            RequestCode.LOCK_BATCH_MQ: self.lock,
            RequestCode.UNLOCK_BATCH_MQ: self.unlock,
            RequestCode.CHECK_CLIENT_CONFIG: self.check_client_config,
        }

    # ---- offsets ---------------------------------------------------------------------------
    def query_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        store = self.w.store
        off = store.query_offset(h.consumerGroup, h.topic, h.queueId)
        if off >= 0:
            return cmd.make_response(ext_fields={"offset": str(off)})
        # A new group on a queue whose first message is still there starts at 0 (RocketMQ's
        # ConsumerManageProcessor; clients consuming from the last offset depend on it).
        if store.min_offset(h.topic, h.queueId) <= 0:
            return cmd.make_response(ext_fields={"offset": "0"})
        return cmd.make_response(ResponseCode.QUERY_NOT_FOUND,
                                 "Not found, V3_0_6_SNAPSHOT maybe this group consumer boot first")

    def update_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = UpdateConsumerOffsetRequestHeader.from_ext(cmd.ext_fields)
        self.w.store.commit_offset(h.consumerGroup, h.topic, h.queueId, h.commitOffset)
        return cmd.make_response()

    def search_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = SearchOffsetRequestHeader.from_ext(cmd.ext_fields)
        off = self.w.store.offset_by_time(h.topic, h.queueId, h.timestamp)
        return cmd.make_response(ext_fields={"offset": str(off)})

    def max_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMaxOffsetRequestHeader.from_ext(cmd.ext_fields)
        return cmd.make_response(ext_fields={"offset": str(self.w.store.max_offset(h.topic, h.queueId))})

    def min_offset(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = GetMinOffsetRequestHeader.from_ext(cmd.ext_fields)
        return cmd.make_response(ext_fields={"offset": str(self.w.store.min_offset(h.topic, h.queueId))})

    def earliest(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = GetEarliestMsgStoretimeRequestHeader.from_ext(cmd.ext_fields)
        return cmd.make_response(ext_fields={"timestamp": str(self.w.store.earliest_store_time(h.topic, h.queueId))})

    # ---- clients ----------------------------------------------------------------------------
    async def heartbeat(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        hb = decode_heartbeat(cmd.body)  # validates before the supervisor sees it
        conn.context["client"] = hb.clientID
        await self.w.ctl_call(cc.ctl(Ctl.HEARTBEAT, cmd.body, chan=conn.context["chan"], addr=conn.peer,
                                     language=cmd.language, version=cmd.version))
        for cd in hb.consumerDataSet:
            for sub in cd.subscriptionDataSet:
                self.w.remember_subscription(cd.groupName, sub)
        return cmd.make_response()

    async def unregister(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = UnregisterClientRequestHeader.from_ext(cmd.ext_fields)
        await self.w.ctl_call(cc.ctl(Ctl.UNREGISTER, chan=conn.context["chan"], clientID=h.clientID,
                                     producerGroup=h.producerGroup, consumerGroup=h.consumerGroup))
        return cmd.make_response()

    async def consumer_list(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        h = GetConsumerListByGroupRequestHeader.from_ext(cmd.ext_fields)
        resp = await self.w.ctl_call(cc.ctl(Ctl.CONSUMER_LIST, group=h.consumerGroup), ok=(0, 1))
        if resp.code != 0:
            return cmd.make_response(resp.code, resp.remark)
        ids = decode_json(resp.body, ConsumerListBody)
        return cmd.make_response(body=encode_json(ids))

    def check_client_config(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """Sent by Java consumers of SQL92 selectors before they start: 1 unless
        enablePropertyFilter, 23 when the expression does not compile."""
        body = decode_json(cmd.body, dict) if cmd.body else {}
        sub = body.get("subscriptionData") or {}
        etype = str(sub.get("expressionType") or "TAG").upper()
        if etype == "TAG":
            return cmd.make_response()
        if etype != "SQL92" or not self.w.cfg.enablePropertyFilter:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     "The broker does not support consumer to filter message by SQL92")
        try:
            sql_filter.compile_cached(str(sub.get("subString") or ""))
        except FilterExpressionError as e:
            return cmd.make_response(ResponseCode.SUBSCRIPTION_PARSE_FAILED, str(e))
        return cmd.make_response()

    async def lock(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        decode_json(cmd.body, LockBatchRequestBody)  # malformed bodies stop here, not at the supervisor
        resp = await self.w.ctl_call(cc.ctl(Ctl.LOCK, cmd.body))
        return cmd.make_response(body=resp.body)

    async def unlock(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        decode_json(cmd.body, LockBatchRequestBody)
        await self.w.ctl_call(cc.ctl(Ctl.UNLOCK, cmd.body))
        return cmd.make_response()
