"""The NameServer's key-value config (PUT/GET/DELETE_KV_CONFIG), namespaced.

RocketMQ keeps it in ``kvConfig.json`` as ``{"configTable":{namespace:{key:value}}}``; with
``kvConfigPath`` set shmq does the same (written to a temp file, fsynced, renamed), else it
lives in memory. The namespace that matters to clients is ORDER_TOPIC_CONFIG: its value for
a topic (``"brokerName:queues;…"``) becomes the route's orderTopicConf.
"""
from __future__ import annotations

import logging
import os

import msgspec

log = logging.getLogger("shmq.namesrv")

NAMESPACE_ORDER_TOPIC_CONFIG = "ORDER_TOPIC_CONFIG"


class _Stored(msgspec.Struct):
    configTable: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)


class KVConfig:
    def __init__(self, path: str = ""):
        self.path = path
        self.table: dict[str, dict[str, str]] = {}
        self.generation = 0
        if path and os.path.exists(path):
            with open(path, "rb") as f:
                data = f.read()
            try:
                self.table = msgspec.json.decode(data, type=_Stored).configTable
            except msgspec.DecodeError as e:
                raise ValueError(f"{path}: not a kvConfig.json: {e}") from None
            log.info("loaded %d KV namespaces from %s", len(self.table), path)

    def put(self, namespace: str, key: str, value: str) -> None:
        old = self.table.setdefault(namespace, {}).get(key)
        self.table[namespace][key] = value
        self.generation += 1
        log.info("KV config %s: %s/%s = %r (was %r)", "put" if old is None else "updated", namespace, key, value, old)
        self._persist()

    def get(self, namespace: str, key: str) -> str | None:
        return self.table.get(namespace, {}).get(key)

    def delete(self, namespace: str, key: str) -> None:
        ns = self.table.get(namespace)
        if ns is not None and ns.pop(key, None) is not None:
            if not ns:
                del self.table[namespace]
            self.generation += 1
            log.info("KV config deleted: %s/%s", namespace, key)
            self._persist()

    def namespace(self, namespace: str) -> dict[str, str] | None:
        ns = self.table.get(namespace)
        return dict(ns) if ns else None

    def _persist(self) -> None:
        if not self.path:
            return
        tmp = f"{self.path}.tmp"
        d = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(d, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, msgspec.json.encode(_Stored(self.table)))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, self.path)
        dfd = os.open(d, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
