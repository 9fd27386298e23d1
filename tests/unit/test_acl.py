"""plain_acl.yml parsing, address patterns and the validation order of RocketMQ 4.x ACL."""
from __future__ import annotations

import pytest

from shmq.broker.shared.acl import PUB, SUB, AclError, PlainAcl, check_perm, load_table, parse_perm
from shmq.broker.shared.acl_addr import AddressError, compile_pattern
from shmq.broker.worker.acl_check import resources
from shmq.protocol import RequestCode, request
from shmq.protocol.acl_sign import Credentials, signature
from shmq.protocol.bodies import ConsumerData, HeartbeatData, SubscriptionData, encode_json


@pytest.mark.parametrize("pattern,yes,no", [
    ("*", ["1.2.3.4", "::1"], []),
    ("", [], ["127.0.0.1"]),
    ("192.168.0.{1,2}", ["192.168.0.1", "192.168.0.2"], ["192.168.0.3"]),
    ("192.168.0.1,10.0.0.3", ["10.0.0.3"], ["10.0.0.4"]),
    ("192.168.1-10.*", ["192.168.1.7", "192.168.10.255"], ["192.168.11.1", "192.169.1.1"]),
    ("10.*.*.*", ["10.9.8.7"], ["11.0.0.1"]),
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.2"]),
    ("::1", ["0:0:0:0:0:0:0:1", "::1"], ["::2"]),
    ("1050:0:0:0:5:600:300c:*", ["1050::5:600:300c:1"], ["1050::5:600:300d:1"]),
])
def test_address_patterns(pattern, yes, no):
    m = compile_pattern(pattern)
    assert all(m(a) for a in yes) and not any(m(a) for a in no)


@pytest.mark.parametrize("bad", ["300.1.1.1", "1.2.3", "*.1.1.1", "1.2.5-3.*", "192.168.{1,2}", "abc"])
def test_bad_patterns_are_refused(bad):
    with pytest.raises(AddressError):
        compile_pattern(bad)


def test_permissions():
    assert parse_perm("PUB|SUB") == parse_perm(" SUB|PUB ") == PUB | SUB
    assert parse_perm(None) == parse_perm("nonsense") == parse_perm("DENY") == 1
    assert check_perm(PUB, PUB | SUB) and not check_perm(SUB, PUB) and not check_perm(PUB, 1 | PUB)
    assert check_perm(2, SUB) and not check_perm(2, 1)


def test_resources_follow_plain_access_validator():
    assert resources(request(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "T"})) == {"T": PUB}
    assert resources(request(RequestCode.SEND_MESSAGE_V2, {"a": "pg", "b": "%RETRY%g"})) == {"%RETRY%pg": SUB}
    assert resources(request(RequestCode.PULL_MESSAGE, topic="T", consumerGroup="g")) == {"T": SUB, "%RETRY%g": SUB}
    assert resources(request(RequestCode.SEND_BATCH_MESSAGE, {"a": "pg", "b": "T"})) is None  # RocketMQ's gap
    hb = HeartbeatData(clientID="c", consumerDataSet=[ConsumerData(
        groupName="g", subscriptionDataSet=[SubscriptionData(topic="T1"), SubscriptionData(topic="T2")])])
    assert resources(request(RequestCode.HEART_BEAT, body=encode_json(hb))) == {"%RETRY%g": SUB, "T1": SUB, "T2": SUB}
    with pytest.raises(AclError):
        resources(request(RequestCode.HEART_BEAT, body=b"{broken"))


def test_signature_covers_sorted_values_and_body():
    c = Credentials("AK-123456", "SK-123456", "tok")
    cmd = c.sign(request(17, {"topic": "T", "b": 1}, b"body"))
    ext = cmd.ext_fields
    assert ext["AccessKey"] == "AK-123456" and ext["SecurityToken"] == "tok"
    # sorted keys: AccessKey, SecurityToken, b, topic
    assert ext["Signature"] == signature({"x": "AK-123456tok1T"}, b"body", "SK-123456")
    # _UNIQUE_KEY_QUERY is not part of the content (PlainAccessValidator leaves it out)
    assert signature({**ext, "_UNIQUE_KEY_QUERY": "true"}, b"body", "SK-123456") == ext["Signature"]


def test_table(tmp_path):
    p = tmp_path / "a.yml"
    p.write_text("""
accounts:
  - {accessKey: 1234567, secretKey: abcdefg, admin: true}
  - {accessKey: 1234567, secretKey: other-one}
  - {accessKey: someone1, secretKey: abcdefg, whiteRemoteAddress: 10.1.*.*, topicPerms: [A=SUB], groupPerms: [g=PUB]}
""")
    t = load_table(str(p))
    assert set(t.accounts) == {"1234567", "someone1"} and t.accounts["1234567"].secret_key == "abcdefg"
    assert t.accounts["someone1"].perms == {"A": SUB, "%RETRY%g": PUB}
    acl = PlainAcl(str(p))
    assert acl.check_for_changes() is False  # unchanged
    # a white address of the account skips the signature
    acl.validate("10.1.2.3", 10, {"AccessKey": "someone1"}, b"", {"A": SUB})
    with pytest.raises(AclError, match="Check signature failed"):
        acl.validate("10.2.2.3", 10, {"AccessKey": "someone1"}, b"", {"A": SUB})
    for text, msg in [("accounts: [{accessKey: short, secretKey: 12345678}]", "longer than 6"),
                      ("accounts: [{accessKey: longenough, secretKey: 12345678, topicPerms: [A]}]",
                       "Parse resource permission failed for topic:A"),
                      ("globalWhiteRemoteAddresses: [999.1.1.1]", "Netaddress"),
                      ("[1, 2]", "mapping"), ("a: [", "YAML")]:
        p.write_text(text)
        with pytest.raises(AclError, match=msg):
            load_table(str(p))
    p.write_text("")
    assert load_table(str(p)).accounts == {}  # empty: nobody gets in
    assert acl.check_for_changes() is True and acl.table.accounts == {}
