"""An I/O error on a flush (the store's fault hook makes the msync / fdatasync / fsync fail with
EIO), on a real broker: the store turns read-only and says so (a CRITICAL log line, the runtime
info, SERVICE_NOT_AVAILABLE to senders), SYNC_FLUSH sends waiting on the failed flush are
answered FLUSH_DISK_TIMEOUT at once, never SEND_OK, reads go on; after a restart with the fault
gone, recovery serves everything that was acknowledged and sends work again."""
from __future__ import annotations

from pathlib import Path

import pytest

from shmq import Message, Producer, SendStatus
from shmq.errors import StoreReadOnly
from shmq.protocol import SyncRemotingClient

from ..integration.broker_helpers import send, start_broker  # noqa: F401
from ..integration.client_helpers import Collector, consumer, make_topic, wait_route
from ..integration.conftest import namesrv, processes, start_namesrv  # noqa: F401
from ..integration.test_metrics import free_port, wait_value
from .helpers import drain, query_key, runtime_info, wait_for

FLUSH_DISK_TIMEOUT, SERVICE_NOT_AVAILABLE = 10, 14


def _read_only(c) -> bool:
    return runtime_info(c)["shmqStoreReadOnly"].startswith("true")


def _restart_and_check(start_broker, br, acked: list[bytes], maybe: list[bytes], key: str | None = None,
                       keyed: bytes = b"") -> None:
    """Stop the broker, start it again on its store (the fault file is cleared by now):
    everything acknowledged is served, in order; of the rest only what was answered
    "stored, not confirmed" may be there; sends work again."""
    br.stop()
    again = start_broker(workers=1, store=Path(br.store), settings=br_settings(br))
    with SyncRemotingClient(again.addr, timeout=10) as c:
        got = drain(c, "EIO")
        assert [b for b in got if b in acked] == acked
        assert set(got) <= set(acked) | set(maybe), set(got) - set(acked) - set(maybe)
        assert not _read_only(c)
        assert send(c, "EIO", b"after the restart").code == 0
        if key is not None:                                # the index agrees (rebuilt if need be)
            assert wait_for(lambda: query_key(c, "EIO", key) == [keyed], 10), query_key(c, "EIO", key)


def br_settings(br) -> dict:
    return {a.split("=", 1)[0]: a.split("=", 1)[1] for a in br.argv[br.argv.index("--set"):] if "=" in a
            and a.split("=", 1)[0] in ("flushDiskType", "syncFlushTimeout")}


def test_sync_flush_eio_answers_flush_disk_timeout_then_read_only(namesrv, start_broker, fault_file):
    # a flush timeout far beyond the client's: a waiting send must be answered by the failure
    settings = {"flushDiskType": "SYNC_FLUSH", "syncFlushTimeout": 60000}
    br = start_broker(namesrv, workers=1, settings=settings)
    make_topic(br, "EIO", queues=1)
    wait_route(namesrv.addr, "EIO")
    acked, maybe = [], []
    with SyncRemotingClient(br.addr, timeout=15) as c, Producer("ep", namesrv.addr, local="always") as p:
        for i in range(10):
            assert send(c, "EIO", b"tcp-%d" % i).code == 0
            acked.append(b"tcp-%d" % i)
        assert p.send(Message("EIO", b"local-0")).status is SendStatus.SEND_OK
        acked.append(b"local-0")
        fault_file.set("eio:msync:/commitlog/")
        r = send(c, "EIO", b"tcp-failed")
        assert r.code == FLUSH_DISK_TIMEOUT and "I/O error" in r.remark, (r.code, r.remark)
        maybe.append(b"tcp-failed")
        r = send(c, "EIO", b"tcp-refused")
        assert r.code == SERVICE_NOT_AVAILABLE and "read-only" in r.remark, (r.code, r.remark)
        with pytest.raises(StoreReadOnly):
            p.send(Message("EIO", b"local-refused"))
        assert _read_only(c)
        got = drain(c, "EIO")                                          # reads go on
        assert got[:len(acked)] == acked and set(got) <= set(acked) | set(maybe)
        col = Collector()                                              # a local consumer too
        cons = consumer(namesrv.addr, "eio-cg", "EIO", col, local="always")
        try:
            assert col.wait_for(lambda s: set(acked) <= s.bodies(), 20), col.bodies()
        finally:
            cons.shutdown()
    assert wait_for(lambda: "CRITICAL shmq.store" in br.log() and "READ-ONLY" in br.log(), 5)
    assert "Traceback" not in br.log(), br.log()
    fault_file.clear()
    _restart_and_check(start_broker, br, acked, maybe)


@pytest.mark.parametrize("rule", ["eio:msync:/consumequeue/", "eio:msync:/index/", "eio:write:{store}/checkpoint"])
def test_async_flush_eio_anywhere_makes_the_store_read_only(start_broker, fault_file, rule):
    port = free_port()
    br = start_broker(workers=1, settings={"metricsExporterType": "PROM", "metricsPromExporterPort": port,
                                           "metricsPushIntervalMillis": 100})
    acked = []
    with SyncRemotingClient(br.addr, timeout=10) as c:
        make_topic(br, "EIO", queues=1)
        for i in range(10):
            assert send(c, "EIO", b"m%d" % i, keys=f"k{i}").code == 0
            acked.append(b"m%d" % i)
        fault_file.set(rule.format(store=br.store))   # the store's checkpoint, not the timer wheel's
        maybe = []
        i = 10
        while not _read_only(c):                       # ASYNC_FLUSH: answered before the flush
            assert i < 10_000, "the store never turned read-only"
            r = send(c, "EIO", b"m%d" % i, keys=f"k{i}")
            if r.code == 0:
                maybe.append(b"m%d" % i)                # acked before the failed flush: not promised
            else:
                assert r.code == SERVICE_NOT_AVAILABLE
            i += 1
        r = send(c, "EIO", b"refused")
        assert r.code == SERVICE_NOT_AVAILABLE and "read-only" in r.remark, (r.code, r.remark)
        assert set(drain(c, "EIO")) == set(acked) | set(maybe)
        assert wait_value(port, "shmq_storage_read_only", 1)[1] == 1
    assert "CRITICAL shmq.store" in br.log() and "READ-ONLY" in br.log()
    assert "Traceback" not in br.log(), br.log()
    fault_file.clear()
    # the injected error dropped no page: a restart (no power loss) keeps every answered send
    _restart_and_check(start_broker, br, acked + maybe, [], key="k3", keyed=b"m3")
