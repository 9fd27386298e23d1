"""What a slave copies from its master (RocketMQ's AdminBrokerProcessor answers that
SlaveSynchronize calls; an Apache RocketMQ slave calls them on a shmq master too):
GET_ALL_CONSUMER_OFFSET (43), GET_ALL_DELAY_OFFSET (45). GET_ALL_TOPIC_CONFIG (21) is
admin.py's, GET_ALL_SUBSCRIPTIONGROUP_CONFIG (201) admin_clients.py's (the subscription groups
mqadmin updateSubGroup creates, config/subscriptionGroup.json, which a slave's replication
also writes).

Bodies in RocketMQ's shapes: consumerOffset.json's text (``{"offsetTable":{"t@g":{0:5}}}``)
from the shared offset table; delayOffset.json as the file holds it (the schedule service,
in the supervisor, is its one writer; RocketMQ also answers the file's text).
"""
from __future__ import annotations

import os

from shmq.protocol import RemotingCommand, RequestCode, ResponseCode
from shmq.store.offsets_file import dumps_int_keys

from ..context import WorkerContext

class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker

    def handlers(self):
        return {
            RequestCode.GET_ALL_CONSUMER_OFFSET: self.consumer_offsets,
            RequestCode.GET_ALL_DELAY_OFFSET: self.delay_offsets,
        }

    def consumer_offsets(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(body=dumps_int_keys(self.w.store.offset_table()).encode())

    def delay_offsets(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        path = os.path.join(self.w.store.cfg.config_dir, "delayOffset.json")
        try:
            with open(path, "rb") as f:
                body = f.read()
        except FileNotFoundError:
            body = b'{"offsetTable":{}}'
        except OSError as e:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"cannot read delayOffset.json: {e}")
        return cmd.make_response(body=body)
