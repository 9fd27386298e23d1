"""ACL (aclEnable=true with a plain_acl.yml): RocketMQ 4.x rules and answers, against a real
broker, with shmq's own client, ali-ons and raw requests. The Java client with
AclClientRPCHook is in test_security_acl_java.py."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from shmq import Message, Producer, SendStatus
from shmq.errors import ShmqError
from shmq.protocol import RequestCode, SyncRemotingClient, attach, request
from shmq.protocol.acl_sign import Credentials
from shmq.protocol.codes import SHMQ_GET_ATTACH_INFO
from shmq.protocol.command import decode_command, encode_command
from shmq.protocol.frame import FrameDecoder

from .broker_helpers import create_topic, pull, send, start_broker  # noqa: F401  (fixture)
from .client_helpers import Collector, consumer, wait_route
from .conftest import namesrv, processes, run_ons_client, start_namesrv  # noqa: F401

USER = Credentials("RocketMQUser", "12345678")
ADMIN = Credentials("RocketMQAdmin", "adminsecret9")
EXC = "org.apache.rocketmq.acl.common.AclException: "

ACL = """\
globalWhiteRemoteAddresses:
  - 127.0.0.9
accounts:
  - accessKey: RocketMQUser
    secretKey: 12345678
    whiteRemoteAddress:
    admin: false
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - AclT=PUB|SUB
      - OnlyPub=PUB
      - Later={later}
      - TBW102=PUB
    groupPerms:
      - badGroup=DENY
  - accessKey: RocketMQAdmin
    secretKey: adminsecret9
    admin: true
"""


def write_acl(path, later="DENY", text=None):
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text if text is not None else ACL.format(later=later))
    os.replace(tmp, path)  # a new inode: the reload sees it whatever the mtime granularity


@pytest.fixture
def acl_broker(namesrv, start_broker, tmp_path):
    path = tmp_path / "plain_acl.yml"
    write_acl(path)
    br = start_broker(namesrv, settings={"aclEnable": "true", "aclFile": str(path)})
    with SyncRemotingClient(br.addr, timeout=5, rpc_hook=ADMIN.sign) as c:
        for t in ("AclT", "OnlyPub", "Later", "Other"):
            assert create_topic(c, t, 2).code == 0
    for t in ("AclT", "OnlyPub", "Later"):
        wait_route(namesrv.addr, t)
    return br, path


def refused(r, why: str) -> bool:
    return r.code == 1 and r.remark == EXC + why


def test_rocketmq_answers_for_every_kind_of_refusal(acl_broker):
    br, _ = acl_broker
    with SyncRemotingClient(br.addr, timeout=5) as c:
        assert refused(send(c, "AclT", b"x"), "No accessKey is configured")
        assert refused(c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)), "No accessKey is configured")
        nobody = Credentials("NobodyKnown", "whatever1")
        assert refused(c.invoke(nobody.sign(request(RequestCode.GET_BROKER_RUNTIME_INFO))),
                       "No acl config for NobodyKnown")
        wrong = Credentials(USER.access_key, "not-the-secret")
        assert refused(c.invoke(wrong.sign(request(RequestCode.GET_BROKER_RUNTIME_INFO))),
                       "Check signature failed for accessKey=RocketMQUser")
        # a signed request altered on the way (the body) fails the signature too
        cmd = USER.sign(request(RequestCode.GET_ALL_TOPIC_CONFIG, body=b"abc"))
        cmd.body = b"abd"
        assert refused(c.invoke(cmd), "Check signature failed for accessKey=RocketMQUser")
    with SyncRemotingClient(br.addr, timeout=5, rpc_hook=USER.sign) as c:
        assert c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)).code == 0
        assert send(c, "AclT", b"ok").code == 0
        assert refused(send(c, "Other", b"x"), "No default permission for topic:Other")
        assert refused(pull(c, "OnlyPub", 0, 0), "No default permission for topic:OnlyPub")
        assert pull(c, "AclT", 0, 0, group="anyGroup").code in (0, 19, 20, 21)
        assert refused(pull(c, "AclT", 0, 0, group="badGroup"), "No default permission for group:badGroup")
        assert refused(create_topic(c, "New", 1), "Need admin permission for request code=17, but accessKey=RocketMQUser is not")
    with SyncRemotingClient(br.addr, timeout=5, rpc_hook=ADMIN.sign) as c:
        assert send(c, "Other", b"admin may").code == 0  # an admin with no perms listed passes


def test_unknown_codes_and_oneway_requests(acl_broker):
    br, _ = acl_broker
    with SyncRemotingClient(br.addr, timeout=5) as c:
        assert c.invoke(request(4242)).code == 3  # not supported: answered before any check, as in RocketMQ
        c.invoke_oneway(request(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "AclT"}, b"x"))  # refused silently
        assert refused(c.invoke(request(RequestCode.GET_BROKER_RUNTIME_INFO)), "No accessKey is configured")


def test_global_white_address_needs_no_signature(acl_broker):
    br, _ = acl_broker
    host, port = br.addr.split(":")
    with socket.socket() as s:
        s.settimeout(5)
        s.bind(("127.0.0.9", 0))
        s.connect((host, int(port)))
        s.sendall(encode_command(request(RequestCode.GET_BROKER_RUNTIME_INFO)))
        dec, frames = FrameDecoder(), []
        while not frames:
            frames = dec.feed(s.recv(65536))
        assert decode_command(frames[0]).code == 0


def test_shmq_client_with_credentials(acl_broker, namesrv):
    br, _ = acl_broker
    with Producer("aclPG", namesrv.addr, local="never", access_key=USER.access_key, secret_key=USER.secret_key) as p:
        assert p.send(Message("AclT", b"hello")).status == SendStatus.SEND_OK
        with pytest.raises(ShmqError, match="No default permission for topic:Other"):
            p.send(Message("Other", b"no"))
        # the async and batch sends are signed too (the async request on the client's loop)
        assert p.send_async(Message("AclT", b"async")).result(20).status == SendStatus.SEND_OK
        assert p.send_batch([Message("AclT", b"b0"), Message("AclT", b"b1")]).status == SendStatus.SEND_OK
        with pytest.raises(ShmqError, match="No default permission for topic:Other"):
            p.send_async(Message("Other", b"no")).result(20)
    col = Collector()
    c = consumer(namesrv.addr, "aclCG", "AclT", col, local="never", access_key=USER.access_key,
                 secret_key=USER.secret_key, consume_from="FIRST_OFFSET")
    try:
        assert col.wait_for(lambda s: b"hello" in {m.body for m in s.msgs}), [m.body for m in col.msgs]
    finally:
        c.shutdown()
    with pytest.raises(ShmqError):
        with Producer("aclPG2", namesrv.addr, local="never") as p:  # no credentials
            p.send(Message("AclT", b"unsigned"))


def test_admin_client_with_credentials(acl_broker, namesrv):
    from shmq.client.admin import Admin
    with Admin(namesrv.addr, access_key=ADMIN.access_key, secret_key=ADMIN.secret_key) as a:
        a.create_topic("MadeByAdmin", 2)
    with Admin(namesrv.addr, access_key=USER.access_key, secret_key=USER.secret_key) as a:
        with pytest.raises(ShmqError, match="Need admin permission"):
            a.create_topic("NotByUser", 2)


def test_security_token_is_signed(acl_broker):
    br, _ = acl_broker
    tok = Credentials(USER.access_key, USER.secret_key, security_token="tok-1")
    with SyncRemotingClient(br.addr, timeout=5) as c:
        assert c.invoke(tok.sign(request(RequestCode.GET_BROKER_RUNTIME_INFO))).code == 0
        cmd = tok.sign(request(RequestCode.GET_BROKER_RUNTIME_INFO))
        cmd.ext_fields["SecurityToken"] = "tok-2"  # swapped after signing
        assert refused(c.invoke(cmd), "Check signature failed for accessKey=RocketMQUser")


def test_hot_reload(acl_broker):
    br, path = acl_broker
    with SyncRemotingClient(br.addr, timeout=5, rpc_hook=USER.sign) as c:
        assert refused(send(c, "Later", b"x"), "No default permission for topic:Later")
        write_acl(path, later="PUB")
        deadline = time.monotonic() + 15
        while send(c, "Later", b"x").code != 0:
            assert time.monotonic() < deadline, "the new rule never took effect"
            time.sleep(0.2)
        # a file that no longer parses keeps the rules in force
        write_acl(path, text="accounts: [\n  - {accessKey: broken")
        time.sleep(1.5)
        for _ in range(4):  # every worker: each has its own copy
            assert send(c, "Later", b"y").code == 0
        write_acl(path, later="DENY")
        deadline = time.monotonic() + 15
        while send(c, "Later", b"z").code == 0:
            assert time.monotonic() < deadline, "the revocation never took effect"
            time.sleep(0.2)


def test_attach_info_needs_an_account_when_acl_is_on(acl_broker):
    br, _ = acl_broker
    with SyncRemotingClient(br.addr, timeout=5) as c:
        assert refused(c.invoke(request(SHMQ_GET_ATTACH_INFO)), "No accessKey is configured")
    with SyncRemotingClient(br.addr, timeout=5, rpc_hook=USER.sign) as c:
        ch = c.invoke(request(SHMQ_GET_ATTACH_INFO)).ext_fields
        proof = attach.proof(attach.read_key(ch["keyFile"]), ch["challenge"])
        r = c.invoke(request(SHMQ_GET_ATTACH_INFO, challenge=ch["challenge"], proof=proof))
        assert r.code == 0 and r.ext_fields["storeRoot"] == br.store


def test_local_producer_with_credentials(acl_broker, namesrv):
    with Producer("aclLocal", namesrv.addr, local="always", access_key=USER.access_key,
                  secret_key=USER.secret_key) as p:
        assert p.send(Message("AclT", b"local")).status == SendStatus.SEND_OK


def test_ali_ons_with_access_key(acl_broker, namesrv):
    args = ["--namesrv", namesrv.addr, "--access-key", USER.access_key, "--secret-key", USER.secret_key]
    sent = run_ons_client("produce", *args, "--topic", "AclT", "--group", "onsPG", "--count", "3", "--body", "ons")
    assert [e["status"] for e in sent if e["event"] == "sent"] == ["SEND_OK"] * 3
    got = run_ons_client("consume", *args, "--topic", "AclT", "--group", "onsCG", "--count", "3",
                         "--from", "first", "--timeout", "30000")
    assert {e["body"] for e in got if e["event"] == "message"} >= {"ons-0", "ons-1", "ons-2"}


def test_no_acl_file_no_start(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "ROCKETMQ_HOME"}
    r = subprocess.run([sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(tmp_path / "s"),
                        "--set", "aclEnable=true"], capture_output=True, text=True, timeout=60, env=env)
    assert r.returncode != 0 and "ROCKETMQ_HOME" in r.stderr
    home = tmp_path / "home"
    (home / "conf").mkdir(parents=True)
    r = subprocess.run([sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(tmp_path / "s"),
                        "--set", "aclEnable=true"], capture_output=True, text=True, timeout=60,
                       env=dict(env, ROCKETMQ_HOME=str(home)))
    assert r.returncode != 0 and "plain_acl.yml" in r.stderr
    (home / "conf" / "plain_acl.yml").write_text("accounts:\n  - {accessKey: short, secretKey: 12345678}\n")
    r = subprocess.run([sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(tmp_path / "s"),
                        "--set", "aclEnable=true"], capture_output=True, text=True, timeout=60,
                       env=dict(env, ROCKETMQ_HOME=str(home)))
    assert r.returncode != 0 and "length should longer than 6" in r.stderr
