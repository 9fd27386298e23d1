"""Request signatures of RocketMQ 4.x ACL (``AclClientRPCHook`` / ``AclUtils`` of rocketmq-acl).

What is signed: the values of the request's extFields sorted by key (``AccessKey`` and, when
given, ``SecurityToken`` included; ``Signature`` itself excluded), concatenated as UTF-8 text
with no separators, followed by the body bytes. The signature is base64(HmacSHA1(secretKey,
that)), sent as the extField ``Signature``. The broker recomputes it over what it received,
leaving out ``Signature`` and ``_UNIQUE_KEY_QUERY`` (PlainAccessValidator.parse), so a client
that sends ``_UNIQUE_KEY_QUERY`` must leave it out of its signature too.

Keys are ASCII, so Python's code-point order is Java's TreeMap (UTF-16 unit) order.
"""
from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Mapping

from shmq.protocol.command import RemotingCommand, java_str

ACCESS_KEY = "AccessKey"
SECRET_KEY = "SecretKey"
SIGNATURE = "Signature"
SECURITY_TOKEN = "SecurityToken"
#: Left out of the content by the broker (MixAll.UNIQUE_MSG_QUERY_FLAG).
UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_UNSIGNED = (SIGNATURE, UNIQUE_KEY_QUERY)


def signature(ext: Mapping[str, str], body: bytes | bytearray | memoryview, secret_key: str) -> str:
    """base64 HmacSHA1 over the sorted values of ``ext`` (less Signature and
    _UNIQUE_KEY_QUERY) and ``body``."""
    mac = hmac.new(secret_key.encode(), digestmod=hashlib.sha1)
    mac.update("".join(ext[k] for k in sorted(ext) if k not in _UNSIGNED).encode())
    if body:
        mac.update(body)
    return base64.b64encode(mac.digest()).decode()


class Credentials:
    """An account of plain_acl.yml, as a client holds it; :meth:`sign` is the RPC hook."""

    __slots__ = ("access_key", "secret_key", "security_token")

    def __init__(self, access_key: str, secret_key: str, security_token: str | None = None):
        if not access_key or not secret_key:
            raise ValueError("both access_key and secret_key are needed to sign requests")
        self.access_key = access_key
        self.secret_key = secret_key
        self.security_token = security_token

    def __repr__(self) -> str:  # never the secret
        return f"Credentials(access_key={self.access_key!r})"

    def sign(self, cmd: RemotingCommand) -> RemotingCommand:
        """Add AccessKey, SecurityToken and Signature to ``cmd`` (in place) and return it."""
        ext = {k: java_str(v) for k, v in cmd.ext_fields.items() if v is not None and k != SIGNATURE}
        ext[ACCESS_KEY] = self.access_key
        if self.security_token is not None:
            ext[SECURITY_TOKEN] = self.security_token
        ext[SIGNATURE] = signature(ext, cmd.body, self.secret_key)
        cmd.ext_fields = ext
        return cmd


def credentials(access_key: str | None, secret_key: str | None,
                security_token: str | None = None) -> Credentials | None:
    """The client option triple: None when no access key is given (requests go unsigned)."""
    if access_key is None and secret_key is None:
        if security_token is not None:
            raise ValueError("security_token needs access_key and secret_key")
        return None
    return Credentials(access_key or "", secret_key or "", security_token)
