"""NameServer request handlers: one method per request code, answered as RocketMQ 4.9.8 does.

(``namesrv/processor/DefaultRequestProcessor.java``.) All handlers are plain functions:
every answer is computed from in-memory tables at once, so the transport answers inline
without a task. Route answers are cached per (topic, JSON form) until the tables change.
"""
from __future__ import annotations

import logging
import time
from collections.abc import Callable

from shmq.message.layout import masked_crc32
from shmq.namesrv.config import NamesrvConfig
from shmq.namesrv.kv import NAMESPACE_ORDER_TOPIC_CONFIG, KVConfig
from shmq.namesrv.routes import FLAG_UNIT, FLAG_UNIT_SUB, RouteTable
from shmq.protocol import RemotingCommand, RequestCode, ResponseCode, Version, javaprops
from shmq.protocol.bodies import (DataVersion, KVTable, RegisterBrokerBody, TopicConfigSerializeWrapper, TopicList,
                                  decode_json, decode_register_body, encode_cluster_info, encode_json,
                                  encode_topic_route)
from shmq.protocol.headers import (AddWritePermOfBrokerRequestHeader, DeleteKVConfigRequestHeader,
                                   DeleteTopicFromNamesrvRequestHeader, GetKVConfigRequestHeader,
                                   GetKVListByNamespaceRequestHeader, GetRouteInfoRequestHeader,
                                   GetTopicsByClusterRequestHeader, PutKVConfigRequestHeader,
                                   QueryDataVersionRequestHeader, RegisterBrokerRequestHeader,
                                   UnRegisterBrokerRequestHeader, WipeWritePermOfBrokerRequestHeader)
from shmq.protocol.transport import Connection

log = logging.getLogger("shmq.namesrv")

#: ``FAQUrl.suggestTodo(FAQUrl.APPLY_TOPIC_URL)``, appended to TOPIC_NOT_EXIST's remark.
_FAQ_SUFFIX = "\nSee http://rocketmq.apache.org/docs/faq/ for further details."


class NamesrvProcessor:
    """Holds the tables and answers requests; ``handlers()`` maps request codes to methods."""

    def __init__(
        self,
        config: NamesrvConfig,
        table: RouteTable | None = None,
        kv: KVConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.config = config
        self.table = table if table is not None else RouteTable()
        self.kv = kv if kv is not None else KVConfig(config.kvConfigPath)
        self.clock = clock
        self._route_cache: dict[tuple[str, bool], tuple[int, int, bytes]] = {}

    def handlers(self) -> dict[int, Callable[[Connection, RemotingCommand], RemotingCommand | None]]:
        R = RequestCode
        return {
            R.PUT_KV_CONFIG: self.put_kv_config,
            R.GET_KV_CONFIG: self.get_kv_config,
            R.DELETE_KV_CONFIG: self.delete_kv_config,
            R.GET_KVLIST_BY_NAMESPACE: self.get_kv_list_by_namespace,
            R.QUERY_DATA_VERSION: self.query_data_version,
            R.REGISTER_BROKER: self.register_broker,
            R.UNREGISTER_BROKER: self.unregister_broker,
            R.GET_ROUTEINFO_BY_TOPIC: self.get_route_info,
            R.GET_BROKER_CLUSTER_INFO: self.get_broker_cluster_info,
            R.WIPE_WRITE_PERM_OF_BROKER: self.wipe_write_perm,
            R.ADD_WRITE_PERM_OF_BROKER: self.add_write_perm,
            R.GET_ALL_TOPIC_LIST_FROM_NAMESERVER: self.get_all_topic_list,
            R.DELETE_TOPIC_IN_NAMESRV: self.delete_topic,
            R.GET_TOPICS_BY_CLUSTER: self.get_topics_by_cluster,
            R.GET_SYSTEM_TOPIC_LIST_FROM_NS: self.get_system_topic_list,
            R.GET_UNIT_TOPIC_LIST: self._flag_list(lambda f: bool(f & FLAG_UNIT)),
            R.GET_HAS_UNIT_SUB_TOPIC_LIST: self._flag_list(lambda f: bool(f & FLAG_UNIT_SUB)),
            R.GET_HAS_UNIT_SUB_UNUNIT_TOPIC_LIST: self._flag_list(
                lambda f: not f & FLAG_UNIT and bool(f & FLAG_UNIT_SUB)
            ),
            R.UPDATE_NAMESRV_CONFIG: self.update_config,
            R.GET_NAMESRV_CONFIG: self.get_config,
        }

    # ---- KV config ----------------------------------------------------------------------------
    def put_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = PutKVConfigRequestHeader.from_ext(cmd.ext_fields)
        self.kv.put(h.namespace, h.key, h.value)
        return cmd.make_response()

    def get_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetKVConfigRequestHeader.from_ext(cmd.ext_fields)
        value = self.kv.get(h.namespace, h.key)
        if value is not None:
            return cmd.make_response(ext_fields={"value": value})
        return cmd.make_response(
            ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace} Key: {h.key}"
        )

    def delete_kv_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteKVConfigRequestHeader.from_ext(cmd.ext_fields)
        self.kv.delete(h.namespace, h.key)
        return cmd.make_response()

    def get_kv_list_by_namespace(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetKVListByNamespaceRequestHeader.from_ext(cmd.ext_fields)
        table = self.kv.namespace(h.namespace)
        if table is None:
            return cmd.make_response(ResponseCode.QUERY_NOT_FOUND, f"No config item, Namespace: {h.namespace}")
        return cmd.make_response(body=encode_json(KVTable(table=table)))

    # ---- brokers ------------------------------------------------------------------------------
    def register_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = RegisterBrokerRequestHeader.from_ext(cmd.ext_fields)
        if h.bodyCrc32 != 0 and masked_crc32(cmd.body) != h.bodyCrc32:
            log.warning("REGISTER_BROKER from %s (%s): crc32 not match", conn.peer, h.brokerAddr)
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, "crc32 not match")
        if not cmd.body:
            body = RegisterBrokerBody()
        elif cmd.version >= Version.V3_0_11:
            body = decode_register_body(cmd.body, compressed=h.compressed)
        else:  # brokers before 3.0.11 sent the wrapper alone
            body = RegisterBrokerBody(topicConfigSerializeWrapper=decode_json(cmd.body, TopicConfigSerializeWrapper))
        result = self.table.register_broker(
            h.clusterName, h.brokerAddr, h.brokerName, h.brokerId, h.haServerAddr,
            body.topicConfigSerializeWrapper, body.filterServerList, conn, self.clock(),
        )
        ext = {}
        if result.ha_server_addr is not None:
            ext["haServerAddr"] = result.ha_server_addr
        if result.master_addr is not None:
            ext["masterAddr"] = result.master_addr
        order = self.kv.namespace(NAMESPACE_ORDER_TOPIC_CONFIG)
        return cmd.make_response(ext_fields=ext, body=encode_json(KVTable(table=order)) if order else b"")

    def unregister_broker(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = UnRegisterBrokerRequestHeader.from_ext(cmd.ext_fields)
        self.table.unregister_broker(h.clusterName, h.brokerAddr, h.brokerName, h.brokerId)
        return cmd.make_response()

    def query_data_version(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = QueryDataVersionRequestHeader.from_ext(cmd.ext_fields)
        version = decode_json(cmd.body, DataVersion)
        changed = self.table.is_changed(h.brokerAddr, version)
        if not changed:
            # A broker whose config did not change skips re-registering: this is its heartbeat.
            self.table.touch(h.brokerAddr, self.clock())
        ours = self.table.data_version(h.brokerAddr)
        return cmd.make_response(
            ext_fields={"changed": "true" if changed else "false"},
            body=encode_json(ours) if ours is not None else b"",
        )

    def wipe_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = WipeWritePermOfBrokerRequestHeader.from_ext(cmd.ext_fields)
        n = self.table.wipe_write_perm(h.brokerName)
        log.info("write perm of broker %s wiped on %d topics, asked by %s", h.brokerName, n, conn.peer)
        return cmd.make_response(ext_fields={"wipeTopicCount": str(n)})

    def add_write_perm(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = AddWritePermOfBrokerRequestHeader.from_ext(cmd.ext_fields)
        n = self.table.add_write_perm(h.brokerName)
        log.info("write perm of broker %s added on %d topics, asked by %s", h.brokerName, n, conn.peer)
        return cmd.make_response(ext_fields={"addTopicCount": str(n)})

    # ---- routes and lists ------------------------------------------------------------------------
    def get_route_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        if "topic" not in cmd.ext_fields:  # RocketMQ's NameServer: the route of topic "null"
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST,
                                     f"No topic route info in name server for the topic: null{_FAQ_SUFFIX}")
        h = GetRouteInfoRequestHeader.from_ext(cmd.ext_fields)
        standard = cmd.version >= Version.V4_9_4 or bool(h.acceptStandardJsonOnly)
        key = (h.topic, standard)
        cached = self._route_cache.get(key)
        gen, kvgen = self.table.generation, self.kv.generation
        if cached is not None and cached[0] == gen and cached[1] == kvgen:
            return cmd.make_response(body=cached[2])
        route = self.table.pickup_route(h.topic)
        if route is None:
            self._route_cache.pop(key, None)
            return cmd.make_response(
                ResponseCode.TOPIC_NOT_EXIST,
                f"No topic route info in name server for the topic: {h.topic}{_FAQ_SUFFIX}",
            )
        if self.config.orderMessageEnable:
            route.orderTopicConf = self.kv.get(NAMESPACE_ORDER_TOPIC_CONFIG, h.topic)
        body = encode_topic_route(route, standard_json=standard)
        if len(self._route_cache) > 100_000:  # topics come and go; keep the cache bounded
            self._route_cache.clear()
        self._route_cache[key] = (gen, kvgen, body)
        return cmd.make_response(body=body)

    def get_broker_cluster_info(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(body=encode_cluster_info(self.table.cluster_info()))

    def get_all_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(body=encode_json(TopicList(topicList=self.table.all_topics())))

    def delete_topic(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = DeleteTopicFromNamesrvRequestHeader.from_ext(cmd.ext_fields)
        self.table.delete_topic(h.topic, h.clusterName)
        log.info("topic %s deleted%s, asked by %s", h.topic, f" in cluster {h.clusterName}" if h.clusterName else "", conn.peer)
        return cmd.make_response()

    def get_topics_by_cluster(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        h = GetTopicsByClusterRequestHeader.from_ext(cmd.ext_fields)
        return cmd.make_response(body=encode_json(TopicList(topicList=self.table.topics_by_cluster(h.cluster))))

    def get_system_topic_list(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        topics, addr = self.table.system_topics()
        return cmd.make_response(body=encode_json(TopicList(topicList=topics, brokerAddr=addr)))

    def _flag_list(self, pick: Callable[[int], bool]) -> Callable[[Connection, RemotingCommand], RemotingCommand]:
        def handle(conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
            return cmd.make_response(body=encode_json(TopicList(topicList=self.table.topics_with_flag(pick))))
        return handle

    # ---- configuration ---------------------------------------------------------------------------
    def update_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        # The door of CVE-2023-33246 / CVE-2023-37582: a remote peer rewriting settings (in Java,
        # paths such as kvConfigPath). shmq-namesrv never takes configuration over the wire.
        log.warning("UPDATE_NAMESRV_CONFIG from %s refused (%d body bytes)", conn.peer, len(cmd.body))
        return cmd.make_response(
            ResponseCode.NO_PERMISSION,
            "UPDATE_NAMESRV_CONFIG is refused: shmq-namesrv takes its configuration only from its "
            "command line and -c file",
        )

    def get_config(self, conn: Connection, cmd: RemotingCommand) -> RemotingCommand:
        return cmd.make_response(body=javaprops.dumps(self.config.as_properties()).encode())
