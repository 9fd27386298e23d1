"""Java .properties reading, as broker.conf and namesrv.conf need it."""
from shmq.protocol.javaprops import dumps, loads


def test_rocketmq_style_file():
    text = ("# comment\n! also comment\n\nbrokerClusterName = DefaultCluster\nbrokerName:broker-a\n"
            "brokerId 0\nnamesrvAddr=127.0.0.1:9876;127.0.0.1:9877\nlong = a\\\n    b\n"
            "esc=tab\\there\\u0041\nempty=\nk\\=x=v\n")
    assert loads(text) == {
        "brokerClusterName": "DefaultCluster", "brokerName": "broker-a", "brokerId": "0",
        "namesrvAddr": "127.0.0.1:9876;127.0.0.1:9877", "long": "ab", "esc": "tab\thereA", "empty": "", "k=x": "v",
    }


def test_dumps():
    assert dumps({"a": 1, "b": "x", "c": None}) == "a=1\nb=x\n"
