"""The local attach request (9900) and the doors kept shut by default (CVE-2023-33246 /
CVE-2023-37582): attach info only for a caller on loopback that proves it can read the store's
key; config-changing requests refused; a non-loopback listen address needs ACL or an override."""
from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest

from shmq import Message, Producer, SendStatus
from shmq.broker.shared.attach import AttachGuard, write_key
from shmq.broker.shared.config import BrokerConfig
from shmq.protocol import RequestCode, SyncRemotingClient, attach, request
from shmq.protocol.codes import SHMQ_GET_ATTACH_INFO

from .broker_helpers import start_broker  # noqa: F401  (fixture)
from .client_helpers import make_topic, wait_route


def test_attach_info_needs_the_proof(namesrv, start_broker):
    br = start_broker(namesrv)
    key_file = os.path.join(br.store, attach.KEY_FILE)
    assert stat.S_IMODE(os.stat(key_file).st_mode) == 0o600
    with SyncRemotingClient(br.addr, timeout=5) as c:
        # no proof: a challenge, and nothing about the store
        r = c.invoke(request(SHMQ_GET_ATTACH_INFO))
        assert r.code == 0 and "storeRoot" not in r.ext_fields and "uid" not in r.ext_fields
        assert r.ext_fields["keyFile"] == key_file
        # a wrong proof: refused, and the challenge is spent
        r2 = c.invoke(request(SHMQ_GET_ATTACH_INFO, challenge=r.ext_fields["challenge"], proof="00" * 32))
        assert r2.code == 16 and "storeRoot" not in r2.ext_fields
        key = attach.read_key(key_file)
        r3 = c.invoke(request(SHMQ_GET_ATTACH_INFO, challenge=r.ext_fields["challenge"],
                              proof=attach.proof(key, r.ext_fields["challenge"])))
        assert r3.code == 16, "a challenge is used once"
        # the right proof to a fresh challenge: the attach info
        ch = c.invoke(request(SHMQ_GET_ATTACH_INFO)).ext_fields["challenge"]
        r4 = c.invoke(request(SHMQ_GET_ATTACH_INFO, challenge=ch, proof=attach.proof(key, ch)))
        assert r4.code == 0 and r4.ext_fields["storeRoot"] == br.store
    with SyncRemotingClient(br.addr, timeout=5) as other:
        # a challenge belongs to the connection that asked for it
        r = other.invoke(request(SHMQ_GET_ATTACH_INFO, challenge=ch, proof=attach.proof(key, ch)))
        assert r.code == 16


def test_local_client_still_attaches(namesrv, start_broker):
    br = start_broker(namesrv)
    make_topic(br, "AT", 2)
    wait_route(namesrv.addr, "AT")
    with Producer("pg", namesrv.addr, local="always") as p:
        assert p.send(Message("AT", b"via the store")).status == SendStatus.SEND_OK
        assert [link for link, _ in p.links._links.values() if link is not None], "attached"


def test_guard_refuses_a_peer_off_loopback(tmp_path):
    write_key(str(tmp_path))
    g = AttachGuard(str(tmp_path))
    ok, why = g.check({}, "192.0.2.7:40000", {})  # a documentation address: no traffic is sent
    assert not ok and "not 192.0.2.7:40000" in why
    for peer in ("127.0.0.1:1", "127.8.9.10:2", "[::1]:3", "[::ffff:127.0.0.1]:4"):
        assert g.check({}, peer, {})[0], peer
    assert not g.check({}, "[::ffff:192.0.2.7]:4", {})[0]


def test_client_reads_only_an_attach_key(tmp_path):
    other = tmp_path / "secret.txt"
    other.write_bytes(b"x" * attach.KEY_SIZE)
    with pytest.raises(ValueError):
        attach.read_key(str(other))
    short = tmp_path / attach.KEY_FILE
    short.write_bytes(b"x")
    with pytest.raises(ValueError):
        attach.read_key(str(short))


def test_config_changes_over_the_wire_are_refused(namesrv, start_broker):
    """CVE-2023-33246 (UPDATE_BROKER_CONFIG rewriting rocketmqHome / filterServer paths) and
    CVE-2023-37582 (UPDATE_NAMESRV_CONFIG rewriting kvConfigPath): refused, nothing changes."""
    br = start_broker(namesrv)
    with SyncRemotingClient(br.addr, timeout=5) as c:
        for code in (RequestCode.UPDATE_BROKER_CONFIG, RequestCode.UPDATE_AND_CREATE_ACL_CONFIG,
                     RequestCode.DELETE_ACL_CONFIG, RequestCode.UPDATE_GLOBAL_WHITE_ADDRS_CONFIG,
                     RequestCode.UPDATE_NAMESRV_CONFIG):
            r = c.invoke(request(code, body=b"brokerPermission=0\nrocketmqHome=/tmp/evil\n"))
            assert r.code == 16, (code, r.code, r.remark)
        r = c.invoke(request(RequestCode.GET_BROKER_CONFIG))
        assert r.code in (0, 3)
        if r.code == 0:
            assert b"/tmp/evil" not in r.body
    with SyncRemotingClient(namesrv.addr, timeout=5) as c:
        r = c.invoke(request(RequestCode.UPDATE_NAMESRV_CONFIG, body=b"kvConfigPath=/tmp/evil\n"))
        assert r.code == 16
        assert b"/tmp/evil" not in c.invoke(request(RequestCode.GET_NAMESRV_CONFIG)).body


def test_listen_beyond_loopback_needs_acl_or_an_override():
    cfg = BrokerConfig()
    with pytest.raises(ValueError, match="aclEnable=true"):
        cfg.update({"listenAddress": "0.0.0.0"})
    BrokerConfig().update({"listenAddress": "0.0.0.0", "allowUnauthenticatedListen": "true"})
    BrokerConfig().update({"listenAddress": "0.0.0.0", "aclEnable": "true"})
    BrokerConfig().update({"listenAddress": "127.0.0.5"})
    BrokerConfig().update({"listenAddress": "::1"})


def test_broker_cli_refuses_to_start_on_a_public_address(tmp_path):
    r = subprocess.run([sys.executable, "-m", "shmq.cli.broker", "--port", "0", "--store", str(tmp_path / "s"),
                        "--set", "listenAddress=0.0.0.0"], capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "aclEnable=true" in (r.stderr + r.stdout)
    assert not (tmp_path / "s" / "commitlog").exists()  # refused before touching anything
