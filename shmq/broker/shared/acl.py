"""plain_acl.yml and the checks of RocketMQ 4.x ``PlainPermissionManager`` (rocketmq-acl 4.9.8).

The file (YAML, read with PyYAML's safe loader)::

    globalWhiteRemoteAddresses: ["10.10.103.*", "192.168.0.*"]
    accounts:
      - accessKey: RocketMQ            # longer than 6 characters, as is secretKey
        secretKey: 12345678
        whiteRemoteAddress: ""         # a matching address skips the signature check
        admin: false                   # admin codes (create/delete topic, group, broker config)
        defaultTopicPerm: DENY         # DENY, PUB, SUB, PUB|SUB; absent: DENY
        defaultGroupPerm: SUB
        topicPerms: [topicA=DENY, topicB=PUB|SUB]
        groupPerms: [groupA=DENY, groupC=SUB]

Validation of one request, in RocketMQ's order (each failure is an :class:`AclError` whose
text is RocketMQ's): a global white address passes everything; else the AccessKey must be
given and known; an account's white address passes; else the Signature must match
(:mod:`shmq.protocol.acl_sign`, compared in constant time); a PUB on RMQ_SYS_TRACE_TOPIC
passes; else admin codes need ``admin: true`` and every resource the request names needs
its permission (a group is its ``%RETRY%<group>`` topic; a resource not listed falls back to
the default permission). SecurityToken is part of the signed content, as in RocketMQ, which
checks nothing more about it.

No account exists unless the file defines it: there are no default credentials.
"""
from __future__ import annotations

import hmac
import logging
import os
from dataclasses import dataclass

import yaml

from shmq.message.names import RETRY_PREFIX
from shmq.protocol.acl_sign import signature
from shmq.service import AsyncService

from .acl_addr import AddressError, Matcher, compile_pattern

log = logging.getLogger("shmq.broker.acl")

DENY, ANY, PUB, SUB = 1, 2, 4, 8
TRACE_TOPIC = "RMQ_SYS_TRACE_TOPIC"
#: Permission.ADMIN_CODE: create/update topic, update broker config, delete topic,
#: create/update and delete subscription group.
ADMIN_CODES = frozenset({17, 25, 215, 200, 207})
#: How often the file is looked at (RocketMQ's AclFileWatchService: 500 ms).
RELOAD_CHECK_S = 0.5


class AclError(Exception):
    """A request refused by the ACL; ``str(e)`` is RocketMQ's AclException message."""


def parse_perm(text) -> int:
    return {"PUB": PUB, "SUB": SUB, "PUB|SUB": PUB | SUB, "SUB|PUB": PUB | SUB}.get(
        str(text).strip() if text is not None else "", DENY)


def check_perm(needed: int, owned: int) -> bool:
    if owned & DENY:
        return False
    if needed & ANY:
        return bool(owned & (PUB | SUB))
    return bool(needed & owned)


def describe(resource: str) -> str:
    """PlainAccessResource.printStr."""
    if resource.startswith(RETRY_PREFIX):
        return f"group:{resource[len(RETRY_PREFIX):]}"
    return f"topic:{resource}"


@dataclass
class Account:
    access_key: str
    secret_key: str
    white: Matcher
    admin: bool
    default_topic_perm: int
    default_group_perm: int
    perms: dict[str, int] | None  # resource (topic, or %RETRY%group) -> perm; None: none listed


@dataclass
class AclTable:
    global_white: list[Matcher]
    accounts: dict[str, Account]


def _resource_perms(entries, is_topic: bool, into: dict[str, int]) -> None:
    for entry in entries or []:
        items = [x for x in str(entry).split("=") if x]
        if len(items) != 2:
            raise AclError(f"Parse resource permission failed for {'topic' if is_topic else 'group'}:{entry}")
        name = items[0].strip()
        into[name if is_topic else RETRY_PREFIX + name] = parse_perm(items[1])


def _account(raw: dict) -> Account:
    ak, sk = raw.get("accessKey"), raw.get("secretKey")
    ak = None if ak is None else str(ak)
    sk = None if sk is None else str(sk)
    if ak is None or sk is None or len(ak) <= 6 or len(sk) <= 6:
        raise AclError(f"The accessKey={ak} and secretKey cannot be null and length should longer than 6")
    perms: dict[str, int] = {}
    _resource_perms(raw.get("groupPerms"), False, perms)
    _resource_perms(raw.get("topicPerms"), True, perms)
    admin = raw.get("admin", False)
    return Account(ak, sk, compile_pattern(raw.get("whiteRemoteAddress")),
                   admin is True or str(admin).lower() == "true",
                   parse_perm(raw.get("defaultTopicPerm")), parse_perm(raw.get("defaultGroupPerm")),
                   perms or None)


def load_table(path: str) -> AclTable:
    """Parse one plain_acl.yml. Raises AclError naming what is wrong (OSError if unreadable)."""
    with open(path, "rb") as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise AclError(f"{path} is not valid YAML: {e}") from None
    if data is None:
        data = {}  # an empty file: no accounts, every request refused
    if not isinstance(data, dict):
        raise AclError(f"{path}: expected a mapping at the top level")
    try:
        white = [compile_pattern(str(a)) for a in data.get("globalWhiteRemoteAddresses") or []]
        accounts: dict[str, Account] = {}
        for raw in data.get("accounts") or []:
            if not isinstance(raw, dict):
                raise AclError(f"{path}: every account must be a mapping, got {raw!r}")
            acc = _account(raw)
            if acc.access_key in accounts:
                log.warning("%s: accessKey %s is repeated; the first one counts", path, acc.access_key)
                continue
            accounts[acc.access_key] = acc
    except AddressError as e:
        raise AclError(str(e)) from None
    return AclTable(white, accounts)


def acl_file_path(acl_file: str, env=os.environ) -> str:
    """``aclFile`` if set, else $ROCKETMQ_HOME/conf/plain_acl.yml (RocketMQ's default place)."""
    if acl_file:
        return os.path.abspath(os.path.expanduser(acl_file))
    home = env.get("ROCKETMQ_HOME")
    if not home:
        raise AclError("aclEnable=true needs aclFile=<path> or ROCKETMQ_HOME (conf/plain_acl.yml under it)")
    return os.path.join(os.path.abspath(home), "conf", "plain_acl.yml")


class PlainAcl:
    """The loaded file. :meth:`check_for_changes` re-reads it when its mtime, size or inode
    changed; a worker runs it every RELOAD_CHECK_S as a background service (shmq.service),
    so the request path never touches the file. A file that no longer parses keeps the
    previous table in force, and says so in the log."""

    def __init__(self, path: str):
        self.path = path
        st = os.stat(path)  # missing at start: the broker refuses to start
        self.table = load_table(path)
        self._stamp = (st.st_mtime_ns, st.st_size, st.st_ino)

    def watcher(self) -> AsyncService:
        return AsyncService("acl-file-watch", RELOAD_CHECK_S, self.check_for_changes, log=log)

    def check_for_changes(self) -> bool:
        """Reload if the file changed; True when a new table is in force."""
        try:
            st = os.stat(self.path)
        except OSError as e:
            log.error("ACL file %s unreadable (%s); the loaded rules stay in force", self.path, e)
            return False
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        if stamp == self._stamp:
            return False
        self._stamp = stamp
        try:
            self.table = load_table(self.path)
        except (AclError, OSError) as e:
            log.error("ACL file %s not reloaded: %s; the previous rules stay in force", self.path, e)
            return False
        log.info("ACL file %s reloaded: %d accounts", self.path, len(self.table.accounts))
        return True

    def validate(self, peer_host: str, code: int, ext: dict[str, str], body,
                 resources: dict[str, int] | None) -> None:
        """Raise AclError unless the request may be served (PlainPermissionManager.validate)."""
        t = self.table
        if any(m(peer_host) for m in t.global_white):
            return
        ak = ext.get("AccessKey")
        if ak is None:
            raise AclError("No accessKey is configured")
        acc = t.accounts.get(ak)
        if acc is None:
            raise AclError(f"No acl config for {ak}")
        if acc.white(peer_host):
            return
        given = ext.get("Signature", "")
        if not hmac.compare_digest(signature(ext, body, acc.secret_key).encode(), given.encode("utf-8", "replace")):
            raise AclError(f"Check signature failed for accessKey={ak}")
        if resources and resources.get(TRACE_TOPIC) == PUB:
            return
        if code in ADMIN_CODES and not acc.admin:
            raise AclError(f"Need admin permission for request code={code}, but accessKey={ak} is not")
        if not resources or (acc.perms is None and acc.admin):
            return
        owned = acc.perms or {}
        for res, needed in resources.items():
            is_group = res.startswith(RETRY_PREFIX)
            perm = owned.get(res)
            if perm is None:
                perm = acc.default_group_perm if is_group else acc.default_topic_perm
            if not check_perm(needed, perm):
                raise AclError(f"No default permission for {describe(res)}")
