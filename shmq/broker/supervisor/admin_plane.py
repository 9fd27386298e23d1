"""The supervisor's side of the admin requests that need its tables: client connections,
which groups consume a topic, calls to one client's connection, and the subscription groups.

Control-channel requests (worker -> supervisor), see shared/control_channel.py:

* CONNECTIONS ext group, kind consumer|producer: body the group's connections (and, for
  consumers, its subscriptions and consume settings), code 206 when no member is online;
* GROUPS_OF_TOPIC ext topic: the consumer groups whose members subscribe to it;
* CALL_CLIENT ext clientId, [group] (consumers) or none (producers), timeout; body a remoting
  frame: the supervisor finds that client's channel and asks the worker holding it (CALL) to
  send the request and return the client's answer, which it hands back as the body. Code 206
  when the client is not connected, 1 (remark says why) when the call fails.
* SUBGROUP ext op=update|delete|all: ``config/subscriptionGroup.json`` in RocketMQ's shape,
  the supervisor its single writer (written atomically, like topics.json).

Why a call is relayed through the supervisor: the client may be connected to any worker, and
only the supervisor knows which (the channel names start with the worker id).
"""
from __future__ import annotations

import json
import logging
import os
import time
from typing import TYPE_CHECKING

import msgspec

from shmq.protocol import RemotingCommand, ResponseCode
from shmq.protocol.admin_bodies import SubscriptionGroupConfig
from shmq.protocol.bodies import DataVersion, decode_json, encode_json
from shmq.store import files
from shmq.broker.shared.control_channel import Ctl, ctl
from .clients import worker_of

if TYPE_CHECKING:
    from .control_plane import ControlPlane

log = logging.getLogger("shmq.broker.admin")

SUBGROUP_FILE = "subscriptionGroup.json"


class SubscriptionGroups:
    """``subscriptionGroup.json``: {"dataVersion": ..., "subscriptionGroupTable": {name: config}}."""

    def __init__(self, path: str):
        self.path = path
        self.table: dict[str, SubscriptionGroupConfig] = {}
        self.version = DataVersion(timestamp=int(time.time() * 1000), counter=0)
        self._stamp: tuple | None = None
        self.reload()

    def reload(self) -> None:
        """Read the file when it changed since last read (a slave's replication rewrites it)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        try:
            with open(self.path, "rb") as f:
                raw = json.loads(f.read() or b"{}")
            self.table = {name: msgspec.convert(c, SubscriptionGroupConfig)
                          for name, c in (raw.get("subscriptionGroupTable") or {}).items()}
            if raw.get("dataVersion"):
                self.version = msgspec.convert(raw["dataVersion"], DataVersion)
        except (OSError, ValueError, msgspec.ValidationError) as e:  # a damaged file: keep serving, say so
            log.error("%s unreadable (%s); keeping the subscription groups read before", self.path, e)

    def encode(self) -> bytes:
        self.reload()
        return encode_json({"dataVersion": self.version, "subscriptionGroupTable": self.table})

    def _save(self, name: str, old: SubscriptionGroupConfig | None) -> None:
        """Write the file after a change of group ``name`` (``old``: its config before, None
        when it was absent). A failed write (a full disk) puts ``old`` and the version back and
        re-raises: memory never holds a group the file does not."""
        old_version = self.version
        self.version = DataVersion(timestamp=int(time.time() * 1000), counter=old_version.counter + 1)
        try:
            files.write_atomic(self.path, encode_json({"dataVersion": self.version, "subscriptionGroupTable": self.table}))
        except BaseException:
            self.version = old_version
            if old is None:
                self.table.pop(name, None)
            else:
                self.table[name] = old
            raise
        st = os.stat(self.path)
        self._stamp = (st.st_mtime_ns, st.st_size, st.st_ino)

    def update(self, c: SubscriptionGroupConfig) -> None:
        old = self.table.get(c.groupName)
        self.table[c.groupName] = c
        self._save(c.groupName, old)

    def delete(self, name: str) -> None:
        old = self.table.pop(name, None)
        if old is not None:
            self._save(name, old)


class AdminPlane:
    def __init__(self, plane: ControlPlane, config_dir: str):
        self.plane = plane
        self.groups = SubscriptionGroups(os.path.join(config_dir, SUBGROUP_FILE))

    def handlers(self):
        return {
            Ctl.CONNECTIONS: self.connections,
            Ctl.GROUPS_OF_TOPIC: self.groups_of_topic,
            Ctl.CALL_CLIENT: self.call_client,
            Ctl.SUBGROUP: self.subgroup,
        }

    def connections(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        clients = self.plane.clients
        group = e["group"]
        if e.get("kind") == "producer":
            infos = list(clients.producers.get(group, {}).values())
            out: dict = {}
        else:
            g = clients.consumers.get(group)
            infos = list(g.channels.values()) if g else []
            out = {} if g is None else {
                "consumeType": g.consume_type, "messageModel": g.message_model,
                "consumeFromWhere": g.consume_from_where,
                "subscriptionTable": {t: msgspec.to_builtins(s) for t, s in g.subscriptions.items()}}
        if not infos:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE, "none")
        out["connectionSet"] = [{"clientId": i.client_id, "clientAddr": i.addr, "language": i.language,
                                 "version": i.version} for i in infos]
        return cmd.make_response(body=encode_json(out))

    def groups_of_topic(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields["topic"]
        groups = sorted(n for n, g in self.plane.clients.consumers.items() if topic in g.subscriptions)
        return cmd.make_response(body=encode_json({"groupList": groups}))

    async def call_client(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        e = cmd.ext_fields
        client_id, group = e["clientId"], e.get("group")
        clients = self.plane.clients
        if group:
            g = clients.consumers.get(group)
            infos = list(g.channels.values()) if g else []
        else:
            infos = [i for chans in clients.producers.values() for i in chans.values()]
        found = [i for i in infos if i.client_id == client_id]
        worker = self.plane.workers.get(worker_of(found[0].chan)) if found else None
        if worker is None or worker.closed:
            return cmd.make_response(ResponseCode.CONSUMER_NOT_ONLINE, "not online",
                                     ext_fields={"version": str(found[0].version) if found else "-1"})
        timeout = float(e.get("timeout", "10"))
        try:
            resp = await worker.send_request(ctl(Ctl.CALL, cmd.body, chan=found[0].chan, timeout=str(timeout)),
                                             timeout + 1.0)
        except Exception as ex:  # the worker went away mid-call
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"call failed: {ex}")
        ext = dict(resp.ext_fields)
        ext["version"] = str(found[0].version)
        return cmd.make_response(resp.code, resp.remark, ext_fields=ext, body=resp.body)

    def subgroup(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        op = cmd.ext_fields.get("op")
        if op == "update":
            self.groups.update(decode_json(cmd.body, SubscriptionGroupConfig))
        elif op == "delete":
            self.groups.delete(cmd.ext_fields["group"])
        return cmd.make_response(body=self.groups.encode())
