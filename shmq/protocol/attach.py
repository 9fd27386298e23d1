"""The proof a local client gives before a broker tells it how to map its store (request 9900).

Why a proof: the attach info (store path, owner generation, uid) is only useful to, and only
given to, a process that could open the store's files anyway. Being on loopback is necessary
but not enough (any user of the host can connect to 127.0.0.1), so the broker also asks the
caller to show it can read ``<store>/attach.key``: 32 random bytes the broker writes at start
with the store's own mode (0600, or 0660 with ``storeGroup``). Whoever can read it can map the
store; whoever cannot gets nothing and stays on TCP. The kernel's permission check is the
authority, not a re-implementation of it (uid/group lists) in the broker.

The exchange, on one connection (the nonce is remembered per connection, used once):

1. client: ``9900`` with no ext fields.
   broker: SUCCESS, ext ``challenge`` (hex nonce) and ``keyFile`` (the path to read); to a
   peer that is not on loopback: NO_PERMISSION.
2. client: ``9900`` with ext ``challenge`` and ``proof`` = hex HMAC-SHA256(key, challenge).
   broker: SUCCESS with the attach info, or NO_PERMISSION.
"""
from __future__ import annotations

import hashlib
import hmac
import os

#: The key file's name inside the store root.
KEY_FILE = "attach.key"
KEY_SIZE = 32


def proof(key: bytes, challenge: str) -> str:
    return hmac.new(key, challenge.encode(), hashlib.sha256).hexdigest()


def read_key(path: str) -> bytes:
    """Read a key file named by a broker. Only a file called ``attach.key`` of exactly
    KEY_SIZE bytes is read, so a broker cannot make a client hash any other file it can read.
    Raises OSError (no access: the caller stays on TCP) or ValueError."""
    if os.path.basename(path) != KEY_FILE:
        raise ValueError(f"{path} is not an attach key file")
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    try:
        data = os.read(fd, KEY_SIZE + 1)
    finally:
        os.close(fd)
    if len(data) != KEY_SIZE:
        raise ValueError(f"{path} is not an attach key ({len(data)} bytes)")
    return data
