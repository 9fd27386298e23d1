import threading
import time

import pytest

from shmq import ConsumeResult, Message, Producer, PushConsumer

from .broker_helpers import create_topic, start_broker  # noqa: F401
from .conftest import namesrv, processes, start_namesrv  # noqa: F401


@pytest.mark.parametrize("local", ["never", "always"])
def test_send_and_consume(namesrv, start_broker, local):
    b = start_broker(namesrv)
    from shmq.protocol import SyncRemotingClient
    with SyncRemotingClient(b.addr) as c:
        create_topic(c, "Smoke", 4)
    time.sleep(0.3)
    got = []
    done = threading.Event()
    with Producer("pg", namesrv.addr, local=local) as p:
        rs = [p.send(Message("Smoke", b"m%d" % i, tags="t", keys=[f"k{i}"])) for i in range(20)]
        assert all(r.status.value == "SEND_OK" for r in rs)

        def on(msgs):
            got.extend(msgs)
            if len(got) >= 20:
                done.set()
            return ConsumeResult.SUCCESS
        c = PushConsumer("cg", namesrv.addr, local=local, consume_from="FIRST_OFFSET")
        c.subscribe("Smoke", "*")
        c.on_message(on)
        c.start()
        try:
            assert done.wait(20), len(got)
        finally:
            c.shutdown()
    assert sorted(m.body for m in got) == sorted(b"m%d" % i for i in range(20))
