"""Broker statistics for mqadmin: GET_BROKER_RUNTIME_INFO (28), GET_TOPIC_STATS_INFO (202),
GET_CONSUME_STATS (208), VIEW_BROKER_STATS_DATA (315), GET_BROKER_CONFIG (26),
CLEAN_EXPIRED_CONSUMEQUEUE (306). Answered as RocketMQ 4.9.8's AdminBrokerProcessor answers.

Where the numbers come from: a broker is several worker processes, so counters a worker keeps
would only count its own connections. Message counts are therefore read from the store, which
all workers share: a topic's puts in a window are the queue entries stored in it
(``max offset - offset_by_time(now - window)``), a group's gets are the entries of that window
its committed offsets have passed. What the store cannot tell (latencies, thread-pool queues)
is reported as 0, the value of an idle RocketMQ broker. ``msgGetTotal*`` and
``getTransferedTps`` count the answering worker's pulls only (``shmqWorkerId`` says which).
"""
from __future__ import annotations

import dataclasses
import json
import os
import time

from shmq.protocol import RemotingCommand, RequestCode, ResponseCode
from shmq.protocol.admin_bodies import encode_consume_stats, encode_stats_data, encode_topic_stats
from shmq.protocol.bodies import KVTable, encode_json

from shmq.broker.shared import control_channel as cc
from shmq.broker.shared.control_channel import Ctl
from ..context import WorkerContext

_WINDOWS = {"minute": 60, "hour": 3600, "day": 86400}


def _read_only(io_error: int) -> str:
    return f"true (a flush failed: {os.strerror(io_error)})" if io_error else "false"


def _midnight_ms(days_back: int = 0) -> int:
    t = time.localtime()
    start = time.mktime((t.tm_year, t.tm_mon, t.tm_mday, 0, 0, 0, 0, 0, -1))
    return int((start - 86400 * days_back) * 1000)


class Processor:
    def __init__(self, worker: WorkerContext):
        self.w = worker
        self.cfg = worker.cfg
        self._get_marks: dict[int, int] = {}  # midnight (ms) -> this worker's get count then

    def handlers(self):
        return {
            RequestCode.GET_BROKER_RUNTIME_INFO: self.runtime_info,
            RequestCode.GET_TOPIC_STATS_INFO: self.topic_stats,
            RequestCode.GET_CONSUME_STATS: self.consume_stats,
            RequestCode.VIEW_BROKER_STATS_DATA: self.view_stats,
            RequestCode.GET_BROKER_CONFIG: self.broker_config,
            RequestCode.CLEAN_EXPIRED_CONSUMEQUEUE: self.clean_expired_cq,
        }

    # ---- counting from the store -----------------------------------------------------------
    def _queues(self, topic: str | None = None):
        for _, t, q, nxt, mn in self.w.store.cb.iter_queue_slots():
            if topic is None or t == topic:
                yield t, q, nxt

    def _puts_since(self, since_ms: int, topic: str | None = None) -> int:
        store = self.w.store
        return sum(max(0, nxt - store.offset_by_time(t, q, since_ms)) for t, q, nxt in self._queues(topic))

    def _gets_since(self, topic: str, group: str, since_ms: int) -> int:
        store = self.w.store
        n = 0
        for t, q, nxt in self._queues(topic):
            done = min(store.query_offset(group, t, q), nxt)
            n += max(0, done - store.offset_by_time(t, q, since_ms))
        return n

    def _tps(self, count_since) -> str:
        now = int(time.time() * 1000)
        return " ".join(f"{count_since(now - s * 1000) / s:.2f}" for s in (10, 60, 600))

    # ---- 28 ---------------------------------------------------------------------------------
    def runtime_info(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        store = self.w.store
        now = int(time.time() * 1000)
        up = max(0, now - self.w.boot_ms) // 1000
        gets = self.w.stats["get"]
        today, yesterday = _midnight_ms(), _midnight_ms(1)
        self._get_marks.setdefault(today, gets if self.w.boot_ms < today else 0)
        st = os.statvfs(self.cfg.store_root)
        disk_ratio = 1.0 - st.f_bavail / st.f_blocks if st.f_blocks else 0.0
        earliest = self._earliest()
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
            "remainHowManyDataToFlush": f"{max(0, store.commit_pos - store.flushed_pos)} B",
            "msgPutTotalTodayNow": str(sum(nxt for _, _, nxt in self._queues())),
            "msgPutTotalTodayMorning": str(sum(nxt for _, _, nxt in self._queues()) - self._puts_since(today)),
            "msgPutTotalYesterdayMorning": str(sum(nxt for _, _, nxt in self._queues()) - self._puts_since(yesterday)),
            "msgGetTotalTodayNow": str(gets),
            "msgGetTotalTodayMorning": str(self._get_marks[today]),
            "msgGetTotalYesterdayMorning": str(self._get_marks.get(yesterday, 0)),
            "putTps": self._tps(self._puts_since),
            "getTransferedTps": "0.00 0.00 0.00",
            "earliestMessageTimeStamp": str(earliest),
            "commitLogDiskRatio": f"{disk_ratio:.4f}",
            "consumeQueueDiskRatio": f"{disk_ratio:.4f}",
            "commitLogDirCapacity": f"Total : {st.f_blocks * st.f_frsize} B, Free : {st.f_bavail * st.f_frsize} B.",
            "dispatchBehindBytes": "0",
            "pageCacheLockTimeMills": "0",
            "startAcceptSendRequestTimeStamp": "0",
            "topicCount": str(len(self.w.topics.table)),
            "shmqWorkers": str(self.cfg.worker_count),
            "shmqWorkerId": str(self.w.wid),
            "shmqWorkerPid": str(os.getpid()),
            "shmqPullHolds": str(len(self.w.holds) if self.w.holds else 0),
            "shmqHaListenPort": str(self.cfg.ha_port if not self.cfg.is_slave else 0),
            # a failed flush made the store read-only (sends refused until a restart)
            "shmqStoreReadOnly": _read_only(store.cb.ctl.pos.io_error),
        }
        for pool, cap in (("send", 10000), ("pull", 100000), ("query", 20000)):
            table[f"{pool}ThreadPoolQueueSize"] = "0"
            table[f"{pool}ThreadPoolQueueCapacity"] = str(cap)
            table[f"{pool}ThreadPoolQueueHeadWaitTimeMills"] = "0"
        table["EndTransactionQueueSize"] = "0"
        table["EndTransactionThreadPoolQueueCapacity"] = "100000"
        return cmd.make_response(body=encode_json(KVTable(table=table)))

    def _earliest(self) -> int:
        times = [self.w.store.earliest_store_time(t, q) for t, q, _ in self._queues()]
        times = [t for t in times if t > 0]
        return min(times) if times else -1

    # ---- 202 / 208 --------------------------------------------------------------------------
    async def topic_stats(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        topic = cmd.ext_fields.get("topic", "")
        tc = self.w.topics.get(topic) or await self.w.fetch_topic(topic)
        if tc is None:
            return cmd.make_response(ResponseCode.TOPIC_NOT_EXIST, f"topic[{topic}] not exist")
        store = self.w.store
        table = {}
        for q in range(tc.writeQueueNums):
            mn, mx = max(0, store.min_offset(topic, q)), max(0, store.max_offset(topic, q))
            ts = store.store_time_at(topic, q, mx - 1) if mx > 0 else 0
            table[(topic, self.cfg.brokerName, q)] = (mn, mx, max(ts, 0))
        return cmd.make_response(body=encode_topic_stats(table))

    async def consume_stats(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        group, topic = cmd.ext_fields.get("consumerGroup", ""), cmd.ext_fields.get("topic") or ""
        store = self.w.store
        if topic.strip():
            topics = [topic]
        else:  # ConsumerOffsetManager.whichTopicByConsumer: the topics the group has offsets in
            topics = sorted({k.rsplit("@", 1)[0] for k in store.offset_table() if k.rsplit("@", 1)[-1] == group})
        online = await self.w.ctl_call(cc.ctl(Ctl.CONNECTIONS, group=group, kind="consumer"), ok=(0, 206))
        subscribed = set()
        if online.code == 0:
            subscribed = set(json.loads(online.body).get("subscriptionTable", {}))
        table = {}
        for t in topics:
            tc = self.w.topics.get(t) or await self.w.fetch_topic(t)
            if tc is None or (subscribed and t not in subscribed):
                continue  # RocketMQ skips a topic the online group does not subscribe to
            for q in range(tc.readQueueNums):
                broker_off = max(0, store.max_offset(t, q))
                cons = max(0, store.query_offset(group, t, q))
                last = store.store_time_at(t, q, cons - 1) if cons > 0 else 0
                table[(t, self.cfg.brokerName, q)] = (broker_off, cons, max(last, 0))
        return cmd.make_response(body=encode_consume_stats(table, 0.0))

    # ---- 315 ---------------------------------------------------------------------------------
    def view_stats(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        name, key = cmd.ext_fields.get("statsName", ""), cmd.ext_fields.get("statsKey", "")
        now = int(time.time() * 1000)
        if name == "TOPIC_PUT_NUMS" and key in self.w.topics:
            count = lambda since: self._puts_since(since, key)  # noqa: E731
        elif name == "GROUP_GET_NUMS" and "@" in key and key.split("@", 1)[0] in self.w.topics:
            topic, group = key.split("@", 1)
            count = lambda since: self._gets_since(topic, group, since)  # noqa: E731
        else:
            return cmd.make_response(ResponseCode.SYSTEM_ERROR, f"The stats <{name}> <{key}> not exist")
        sums = {w: count(now - s * 1000) for w, s in _WINDOWS.items()}
        body = encode_stats_data(*((sums[w], round(sums[w] / s, 2)) for w, s in _WINDOWS.items()))
        return cmd.make_response(body=body)

    # ---- 26 / 306 ----------------------------------------------------------------------------
    def broker_config(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """Configuration.getAllConfigsFormatString: ``key=value`` lines; the response header's
        ``version`` is the configuration's data version."""
        lines = [f"{f.name}={_prop(getattr(self.cfg, f.name))}" for f in dataclasses.fields(self.cfg)
                 if not f.name.startswith("_")]
        version = encode_json({"counter": 0, "timestamp": self.w.boot_ms}).decode()
        return cmd.make_response(ext_fields={"version": version}, body=("\n".join(sorted(lines)) + "\n").encode())

    def clean_expired_cq(self, conn, cmd: RemotingCommand) -> RemotingCommand:
        """RocketMQ drops consume queues of deleted topics and those wholly below the CommitLog's
        minimum. shmq's supervisor does both after every expiry round (store/cleanup.py), so
        there is nothing left to do on request; the answer is RocketMQ's."""
        return cmd.make_response()


def _prop(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return "" if v is None else str(v)
