"""A client that runs as another user (file-mode tests; started as root by the test).

    python -m tests.helpers.other_user_client UID GID GROUPS NAMESRV TOPIC STORE_ROOT

The interpreter lives under /root (mode 0700), which another user cannot enter, so a child
cannot simply exec it after setuid: this process starts as root, imports everything it will
use, then drops to UID/GID (supplementary GROUPS: comma list or "-") for good, and only then
touches the store. Prints one JSON object: what the user could and could not do.
"""
from __future__ import annotations

import asyncio  # noqa: F401  (imported before the privileges go: /root is unreadable after)
import concurrent.futures  # noqa: F401
import encodings.idna  # noqa: F401  (socket.getaddrinfo needs it)
import json
import os
import sys

import posix_ipc

from shmq import Message, Producer
from shmq.errors import ShmqError
from shmq.protocol import attach
from shmq.store import MessageStore
from shmq.store.control import segment_name


def drop(uid: int, gid: int, groups: list[int]) -> None:
    os.setgroups(groups)
    os.setgid(gid)
    os.setuid(uid)
    assert os.getuid() == uid and os.geteuid() == uid


def try_(fn) -> str:
    try:
        fn()
        return "ok"
    except (OSError, ShmqError, ValueError, posix_ipc.Error) as e:
        return f"{type(e).__name__}: {e}"


def main(argv: list[str]) -> int:
    uid, gid = int(argv[0]), int(argv[1])
    groups = [int(g) for g in argv[2].split(",")] if argv[2] != "-" else []
    namesrv, topic, root = argv[3], argv[4], argv[5]
    drop(uid, gid, groups)
    out: dict = {"uid": os.getuid()}
    out["read_key"] = try_(lambda: attach.read_key(os.path.join(root, attach.KEY_FILE)))
    out["open_shm"] = try_(lambda: posix_ipc.SharedMemory(segment_name(root)).close_fd())
    out["attach_store"] = try_(lambda: MessageStore.attach(root).close())
    with Producer("otherUserPG", namesrv, local="auto") as p:
        r = p.send(Message(topic, b"from another user (auto)"))
        out["auto_status"] = str(r.status)
        out["auto_local"] = any(link is not None for link, _ in p.links._links.values())

    def always():
        with Producer("otherUserPG2", namesrv, local="always") as p2:
            p2.send(Message(topic, b"from another user (always)"))
    out["always"] = try_(always)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
