"""config/consumerOffset.json in RocketMQ's shape:

    {"offsetTable":{"topic@group":{0:12,1:5}}}

The queue-id keys are unquoted numbers, as fastjson writes Integer map keys; we read them
quoted or not. Written atomically (temp file, fsync, rename, directory fsync)."""
from __future__ import annotations

import json
import logging
import os
import re

from . import files

log = logging.getLogger("shmq.store.offsets")
FILE = "consumerOffset.json"
_BARE_INT_KEY = re.compile(r'([{,]\s*)(-?\d+)(\s*:)')


def dumps_int_keys(table: dict[str, dict[int, int]]) -> str:
    inner = ",".join(
        json.dumps(k) + ":{" + ",".join(f"{q}:{o}" for q, o in sorted(v.items())) + "}"
        for k, v in sorted(table.items()))
    return '{"offsetTable":{' + inner + "}}"


def loads_int_keys(text: str) -> dict:
    return json.loads(_BARE_INT_KEY.sub(r'\1"\2"\3', text))


def save_offsets(config_dir: str, table: dict[str, dict[int, int]]) -> None:
    files.write_atomic(os.path.join(config_dir, FILE), dumps_int_keys(table).encode())


def load_offsets(config_dir: str):
    """(key "topic@group", queue id, offset) triples; a damaged file is logged and skipped
    (its .bak, written by nobody here, is not consulted: writes are atomic)."""
    path = os.path.join(config_dir, FILE)
    try:
        with open(path) as f:
            data = loads_int_keys(f.read())
    except FileNotFoundError:
        return []
    except (ValueError, OSError) as e:
        log.error("cannot read %s: %s", path, e)
        return []
    out = []
    for key, queues in (data.get("offsetTable") or {}).items():
        for q, off in queues.items():
            out.append((key, int(q), int(off)))
    return out
