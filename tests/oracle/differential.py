"""The differential test's machinery: request sequences run against a :class:`Target`, and the
parts of each answer a client reads, reduced to what must be equal between shmq and Apache
RocketMQ (codes, extFields names, body shapes), not values that must differ (timestamps,
addresses, broker names, message ids).

A *case* is a function ``case(t, names) -> list[(label, RemotingCommand | None)]``; ``names``
holds the topic/group names of the run (the same for both targets); ``None`` is "no answer
within the time-out" (RocketMQ stays silent on some requests).
"""
from __future__ import annotations

import re
import time
from typing import Any

import msgspec

from shmq.errors import RemotingTimeout
from shmq.protocol import RemotingCommand, RequestCode, request
from shmq.protocol.bodies import decode_json
from shmq.message.batch import encode_batch
from shmq.message.record import iter_records

#: request codes whose body is a run of message records, not JSON
MESSAGE_BODIES = {RequestCode.PULL_MESSAGE, RequestCode.QUERY_MESSAGE, RequestCode.VIEW_MESSAGE_BY_ID}


def invoke(c, code: int, ext: dict[str, Any] | None = None, body: bytes = b"",
           timeout: float = 5.0) -> RemotingCommand | None:
    cmd = request(code, None, body, **(ext or {}))
    try:
        return c.invoke(cmd, timeout)
    except RemotingTimeout:
        return None


#: JSON objects keyed by data (topic, group, broker names, queue ids), not by field names: their
#: shape is the merged shape of their values
MAP_FIELDS = {"topicConfigTable", "subscriptionGroupTable", "offsetTable", "brokerAddrTable",
              "clusterAddrTable", "brokerAddrs", "filterServerTable", "consumerTable", "subscriptionTable"}


def shape(value: Any, key: str | None = None) -> Any:
    """Keys and value types, recursively; a list is the shape of its first element."""
    if isinstance(value, dict) and key in MAP_FIELDS:
        merged: dict = {}
        for v in value.values():
            sv = shape(v)
            if isinstance(sv, dict) and isinstance(merged, dict):
                merged.update(sv)
            else:
                merged = sv
        return {"<key>": merged} if value else {}
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if value is None:
        return "null"
    return "str"


def _body_shape(code: int, body: bytes, target) -> Any:
    if not body:
        return None
    if code in MESSAGE_BODIES:
        msgs = list(iter_records(body))
        return {"messages": len(msgs),
                "properties": sorted({k for m in msgs for k in m.properties})}
    text = body.decode("utf-8", "replace")
    # what necessarily differs between the two peers: their names and addresses
    for v, mark in ((target.broker, "<addr>"), (target.namesrv, "<addr>"),
                    (target.broker_name, "<broker>"), (target.cluster, "<cluster>")):
        text = text.replace(v, mark)
    text = re.sub(r"127\.0\.0\.1:\d+", "<addr>", text)
    try:
        return shape(decode_json(text.encode(), dict))
    except Exception:
        try:
            return shape(msgspec.json.decode(text.encode()))
        except Exception:
            if text.startswith("{"):  # fastjson's MessageQueue-keyed maps: compare the text's form
                return "<not JSON: " + re.sub(r"\d+", "0", text) + ">"
            return f"<{len(text)} characters, not JSON>"


def observe(req_code: int, resp: RemotingCommand | None, target) -> dict:
    if resp is None:
        return {"answer": "none"}
    return {"code": resp.code, "ext": sorted(resp.ext_fields),
            "body": _body_shape(req_code, resp.body, target)}


class Recorder:
    """Runs requests on one connection and keeps ``(label, observation)`` pairs."""

    def __init__(self, target, which: str = "broker"):
        self.target = target
        self.client = target.client(which, timeout=5)
        self.seen: list[tuple[str, dict]] = []
        self.responses: dict[str, RemotingCommand | None] = {}

    def __call__(self, label: str, code: int, ext: dict | None = None, body: bytes = b"",
                 timeout: float = 5.0, until=None) -> RemotingCommand | None:
        """``until(resp)``: repeat the request (for up to 10 s) until it holds; for what a
        broker makes visible asynchronously (RocketMQ dispatches to its ConsumeQueues and
        index in a background thread)."""
        deadline = time.monotonic() + 10
        while True:
            resp = invoke(self.client, code, ext, body, timeout)
            if until is None or until(resp) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        self.seen.append((label, observe(code, resp, self.target)))
        self.responses[label] = resp
        return resp

    def close(self) -> None:
        self.client.close()


def now_ms() -> int:
    return int(time.time() * 1000)
