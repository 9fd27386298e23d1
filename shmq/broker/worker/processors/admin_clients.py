"""Who is connected, and requests relayed to one client: GET_CONSUMER_CONNECTION_LIST (203),
GET_PRODUCER_CONNECTION_LIST (204), QUERY_TOPIC_CONSUME_BY_WHO (300), GET_CONSUMER_RUNNING_INFO
(307), CONSUME_MESSAGE_DIRECTLY (309), SEND_REPLY_MESSAGE(_V2) (324/325) and the subscription
groups: UPDATE_AND_CREATE_SUBSCRIPTIONGROUP (200), GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201),
DELETE_SUBSCRIPTIONGROUP (207). Codes and remarks are RocketMQ 4.9.8's AdminBrokerProcessor's
and ReplyMessageProcessor's.

The client registry is the supervisor's (supervisor/admin_plane.py): these handlers ask it, and
a call to one client (307, 309, the reply push) goes through it to the worker holding that
client's connection, whichever worker that is.
"""
from __future__ import annotations

import json
import random
import time

from shmq.protocol import RemotingCommand, RequestCode, ResponseCode, decode_command, encode_command, request
from shmq.protocol.admin_bodies import SubscriptionGroupConfig
from shmq.protocol.bodies import decode_json, encode_json
from shmq.protocol.headers import decode_send_header
from shmq.message.msgid import decode_offset_msg_id
from shmq.message.properties import decode_properties, encode_properties

from shmq.broker.shared import control_channel as cc
from shmq.broker.shared.control_channel import Ctl
from ..context import WorkerContext, born_host
from .send_fast import send_ext

#: Broker2Client.callClient's timeout.
CALL_TIMEOUT_S = 10.0
#: MQVersion.Version.V3_1_8_SNAPSHOT.ordinal(): older consumers cannot answer 307/309.
V3_1_8_SNAPSHOT = 49


class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker
        self.cfg = worker.cfg

    def handlers(self):
        return {
            RequestCode.GET_CONSUMER_CONNECTION_LIST: self.consumer_connections,
            RequestCode.GET_PRODUCER_CONNECTION_LIST: self.producer_connections,
            RequestCode.QUERY_TOPIC_CONSUME_BY_WHO: self.consume_by_who,
            RequestCode.GET_CONSUMER_RUNNING_INFO: self.running_info,
            RequestCode.CONSUME_MESSAGE_DIRECTLY: self.consume_directly,
            RequestCode.SEND_REPLY_MESSAGE: self.send_reply,
            RequestCode.SEND_REPLY_MESSAGE_V2: self.send_reply,
            RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP: self.update_subgroup,
            RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG: self.all_subgroups,
            RequestCode.DELETE_SUBSCRIPTIONGROUP: self.delete_subgroup,
        }

    async def _connections(self, group: str, kind: str) -> dict | None:
        r = await self.w.ctl_call(cc.ctl(Ctl.CONNECTIONS, group=group, kind=kind), ok=(0, 206))
        return json.loads(r.body) if r.code == 0 else None

    # ---- 203 / 204 / 300 ----------------------------------------------------------------------
    async def consumer_connections(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("consumerGroup", "")
        data = await self._connections(group, "consumer")
        if data is None:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE, f"the consumer group[{group}] not online")
        return cmd.make_response(body=encode_json(data))

    async def producer_connections(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("producerGroup", "")
        data = await self._connections(group, "producer")
        if data is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"the producer group[{group}] not exist")
        return cmd.make_response(body=encode_json(data))

    async def consume_by_who(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """The groups whose online members subscribe to the topic, plus every group holding an
        offset on it (ConsumerOffsetManager.whichGroupByTopic)."""
        topic = cmd.ext_fields.get("topic", "")
        r = await self.w.ctl_call(cc.ctl(Ctl.GROUPS_OF_TOPIC, topic=topic))
        groups = set(json.loads(r.body)["groupList"])
        for key in self.w.store.offset_table():
            t, _, g = key.rpartition("@")
            if t == topic:
                groups.add(g)
        return cmd.make_response(body=encode_json({"groupList": sorted(groups)}))

    # ---- 307 / 309 ------------------------------------------------------------------------------
    async def _call_consumer(self, cmd: RemotingCommand, code: int, body: bytes) -> RemotingCommand:
        """AdminBrokerProcessor.callConsumer: the request, same extFields, on that consumer's
        connection; its answer is the answer."""
        group, client = cmd.ext_fields.get("consumerGroup", ""), cmd.ext_fields.get("clientId", "")
        inner = request(code, None, body, **cmd.ext_fields)
        r = await self.w.ctl_call(cc.ctl(Ctl.CALL_CLIENT, encode_command(inner)[4:], clientId=client, group=group,
                                         timeout=str(CALL_TIMEOUT_S)), ok=(0, 1, 206, 207))
        if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"The Consumer <{group}> <{client}> not online")
        if 0 <= int(r.ext_fields.get("version", "-1")) < V3_1_8_SNAPSHOT:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR,
                                     f"The Consumer <{client}> Version <{r.ext_fields['version']}> too low to finish, "
                                     "please upgrade it to V3_1_8_SNAPSHOT")
        if r.code == ResponseCode.CONSUME_MSG_TIMEOUT:
            return cmd.make_response(ResponseCode.CONSUME_MSG_TIMEOUT, f"consumer <{group}> <{client}> Timeout: {r.remark}")
        if r.code != 0:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"invoke consumer <{group}> <{client}> Exception: {r.remark}")
        answer = decode_command(r.body)
        return cmd.make_response(answer.code, answer.remark, dict(answer.ext_fields), answer.body)

    async def running_info(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return await self._call_consumer(cmd, RequestCode.GET_CONSUMER_RUNNING_INFO, cmd.body)

    async def consume_directly(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """The message (by its offset msgId) goes to the consumer as the body; brokerName is added."""
        cmd.ext_fields["brokerName"] = self.cfg.brokerName
        body = b""
        try:
            offset = decode_offset_msg_id(cmd.ext_fields.get("msgId", "")).offset
            rec = self.w.store.read_at(offset)
            body = bytes(rec) if rec is not None else b""
        except ValueError:  # RocketMQ sends the request without a body when the id is not an offset id
            pass
        return await self._call_consumer(cmd, RequestCode.CONSUME_MESSAGE_DIRECTLY, body)

    # ---- 324 / 325 ------------------------------------------------------------------------------
    async def send_reply(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """ReplyMessageProcessor: push the reply to the requesting producer (REPLY_TO_CLIENT) on
        its own connection (PUSH_REPLY_MESSAGE_TO_CLIENT), and store it in the reply topic
        (storeReplyMessageEnable, on by default). Not pushed: SYSTEM_ERROR saying why."""
        h = decode_send_header(RequestCode.SEND_MESSAGE_V2 if cmd.code == RequestCode.SEND_REPLY_MESSAGE_V2
                               else RequestCode.SEND_MESSAGE, cmd.ext_fields)
        tc = self.w.topics.get(h.topic) or await self.w.fetch_topic(h.topic)
        if tc is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{h.topic}] not exist, apply first please!")
        qid = h.queueId if h.queueId >= 0 else random.randrange(max(1, tc.writeQueueNums))
        props = decode_properties(h.properties or "")
        sender = props.get("REPLY_TO_CLIENT")
        bh = born_host(conn)
        ext = {"bornHost": f"{bh[0]}:{bh[1]}", "storeHost": self.cfg.broker_addr,
               "storeTimestamp": str(int(time.time() * 1000)), "producerGroup": h.producerGroup, "topic": h.topic,
               "defaultTopic": h.defaultTopic, "defaultTopicQueueNums": str(h.defaultTopicQueueNums),
               "queueId": str(h.queueId), "sysFlag": str(h.sysFlag), "bornTimestamp": str(h.bornTimestamp),
               "flag": str(h.flag), "reconsumeTimes": str(h.reconsumeTimes or 0), "unitMode": str(bool(h.unitMode)).lower()}
        if sender is None:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "reply message properties[REPLY_TO_CLIENT] is null")
        props["PUSH_REPLY_TIME"] = str(int(time.time() * 1000))
        ext["properties"] = encode_properties(props)
        push = request(RequestCode.PUSH_REPLY_MESSAGE_TO_CLIENT, None, cmd.body, **ext)
        r = await self.w.ctl_call(cc.ctl(Ctl.CALL_CLIENT, encode_command(push)[4:], clientId=sender,
                                         timeout=str(CALL_TIMEOUT_S)), ok=(0, 1, 206, 207))
        if r.code == ResponseCode.CONSUMER_NOT_ONLINE:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"push reply message fail, channel of <{sender}> not found.")
        if r.code != 0 or decode_command(r.body).code != 0:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"push reply message to {sender}fail.")
        ext_out = send_ext("0", qid, 0)
        res = self.w.store.put(h.topic, qid, cmd.body, (h.properties or "").encode(), flag=h.flag,
                               sysflag=h.sysFlag, born_timestamp=h.bornTimestamp, born_host=bh,
                               reconsume_times=h.reconsumeTimes or 0, wait_flush=False)
        self.w.holds.appended()
        if res is not None and getattr(res, "msg_id", None):
            ext_out.update(msgId=res.msg_id, queueOffset=str(res.queue_offset))
        return cmd.make_response(ext_fields=ext_out)

    # ---- 200 / 201 / 207 ------------------------------------------------------------------------
    async def update_subgroup(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        if cmd.body:
            decode_json(cmd.body, SubscriptionGroupConfig)  # a malformed body stops here
            await self.w.ctl_call(cc.ctl(Ctl.SUBGROUP, cmd.body, op="update"))
        return cmd.make_response()

    async def all_subgroups(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        r = await self.w.ctl_call(cc.ctl(Ctl.SUBGROUP, op="all"))
        return cmd.make_response(body=r.body)

    async def delete_subgroup(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        group = cmd.ext_fields.get("groupName", "")
        await self.w.ctl_call(cc.ctl(Ctl.SUBGROUP, op="delete", group=group))
        if cmd.ext_fields.get("removeOffset", "false").lower() == "true":
            store = self.w.store
            for key, queues in store.offset_table().items():
                if key.rpartition("@")[2] == group:
                    t = key.rpartition("@")[0]
                    for q in queues:
                        store.commit_offset(group, t, q, -1)
        return cmd.make_response()
