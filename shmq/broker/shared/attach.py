"""Broker side of the local attach exchange (see :mod:`shmq.protocol.attach` for why).

The supervisor writes a fresh key at every start (:func:`write_key`, before any worker runs);
each worker reads it once and answers 9900 through :class:`AttachGuard`.
"""
from __future__ import annotations

import hmac
import ipaddress
import os
import secrets

from shmq.protocol.attach import KEY_FILE, KEY_SIZE, proof
from shmq.store.files import write_atomic

_NONCE = "attach_nonce"


def key_path(root: str) -> str:
    return os.path.join(root, KEY_FILE)


def write_key(root: str, mode: int = 0o600, group: str | None = None) -> str:
    """Replace the key file with fresh random bytes, created with exactly ``mode`` (fchmod,
    so the umask cannot widen or narrow it) and ``group``; a reader sees the old or the new
    key, never a partial one (rename)."""
    path = key_path(root)
    write_atomic(path, secrets.token_bytes(KEY_SIZE), mode & 0o660, group)  # never readable by others
    return path


def peer_is_loopback(peer: str) -> bool:
    host = peer.rpartition(":")[0].strip("[]")
    try:
        addr = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(addr, "ipv4_mapped", None)
    return (mapped or addr).is_loopback


class AttachGuard:
    """Decides whether a 9900 request gets the attach info."""

    def __init__(self, root: str):
        self.path = key_path(root)
        with open(self.path, "rb") as f:
            self._key = f.read()

    def check(self, context: dict, peer: str, ext: dict[str, str]) -> tuple[bool, dict[str, str] | str]:
        """(True, {}) to answer with the info; (True, challenge ext) to answer with a
        challenge; (False, remark) to refuse."""
        if not peer_is_loopback(peer):
            return False, f"the local attach info is only given to clients on the broker's host, not {peer}"
        given = ext.get("proof")
        if given is None:
            nonce = secrets.token_hex(16)
            context[_NONCE] = nonce
            return True, {"challenge": nonce, "keyFile": self.path}
        nonce = context.pop(_NONCE, None)  # used once, whatever the outcome
        if nonce is None or ext.get("challenge") != nonce:
            return False, "no local attach challenge is open on this connection"
        if not hmac.compare_digest(proof(self._key, nonce), given):
            return False, "the local attach proof does not match (the caller cannot read the store's key)"
        return True, {}
