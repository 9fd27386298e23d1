"""A full disk, on a real broker (TCP) and a local producer sharing its store: ENOSPC when the
next CommitLog file is preallocated and at an IndexFile's creation (config writes:
test_config_write.py; a ConsumeQueue file: test_real_tmpfs.py, on a really full filesystem, as
ConsumeQueue space is allocated where the hook cannot see it once ConsumeQueue files are sparse). Senders
get a clean error, nothing refused is stored, nothing stored is lost, the broker keeps serving
reads, and everything works again once space returns, without a restart. The disk is made
"full" through the store's fault hook (shmq/store/faults.py, a control file every process
follows); test_real_tmpfs.py does it with a real full filesystem where the machine allows."""
from __future__ import annotations

import random

import pytest

from shmq import Message, Producer, SendStatus
from shmq.errors import DiskFull
from shmq.protocol import SyncRemotingClient

from ..integration.broker_helpers import send, start_broker  # noqa: F401
from ..integration.client_helpers import make_topic, wait_route
from ..integration.conftest import namesrv, processes, start_namesrv  # noqa: F401
from ..integration.test_metrics import free_port, wait_value
from .helpers import drain, query_key, wait_for

FILE = 256 * 1024      # small CommitLog files: a few dozen sends fill one
BODY = 8 * 1024
SERVICE_NOT_AVAILABLE = 14


def body(tag: str, i: int) -> bytes:
    """Incompressible (a local producer compresses bodies over 4 KiB), so each fills BODY bytes."""
    return f"{tag}-{i:05d}-".encode() + random.Random(f"{tag}{i}").randbytes(BODY)


def test_commitlog_preallocation_enospc_refuses_cleanly_then_recovers(namesrv, start_broker, fault_file):
    br = start_broker(namesrv, workers=1, settings={"mappedFileSizeCommitLog": FILE})
    make_topic(br, "DF", queues=1)
    wait_route(namesrv.addr, "DF")
    acked: list[bytes] = []
    with SyncRemotingClient(br.addr, timeout=10) as c, Producer("dfp", namesrv.addr, local="always", compress_msg_body_over=1 << 20) as p:
        for i in range(5):
            assert send(c, "DF", body("tcp", i)).code == 0
            acked.append(body("tcp", i))
        fault_file.set("enospc:preallocate:/commitlog/")
        # the current file and the one made ahead fill up; the one after cannot be allocated
        refused = None
        for i in range(5, 5 + 4 * FILE // BODY):
            r = send(c, "DF", body("tcp", i))
            if r.code != 0:
                refused = r
                break
            acked.append(body("tcp", i))
        assert refused is not None, "the disk never ran full"
        assert refused.code == SERVICE_NOT_AVAILABLE and "disk is full" in refused.remark, refused.remark
        assert "/commitlog/" not in refused.remark                       # no store path to a peer
        assert send(c, "DF", body("tcp", 99999)).code == SERVICE_NOT_AVAILABLE
        with pytest.raises(DiskFull):                                     # the local producer: typed
            p.send(Message("DF", body("local", 0)))
        assert drain(c, "DF") == acked                                    # reads go on; nothing refused stored
        fault_file.clear()                                                # space returns
        r = send(c, "DF", body("tcp", 100000))
        assert r.code == 0, r.remark
        acked.append(body("tcp", 100000))
        for i in range(1, 4 * FILE // BODY):                              # across the next files too
            assert p.send(Message("DF", body("local", i))).status is SendStatus.SEND_OK
            acked.append(body("local", i))
        assert drain(c, "DF") == acked
    assert br.alive()
    assert "Traceback" not in br.log()


def test_index_file_enospc_holds_indexing_back_never_the_store(namesrv, start_broker, fault_file):
    fault_file.set("enospc:preallocate:/index/")                         # no IndexFile can be made
    port = free_port()
    br = start_broker(namesrv, workers=1, settings={"metricsExporterType": "PROM", "metricsPromExporterPort": port,
                                                    "metricsPushIntervalMillis": 100})
    make_topic(br, "DI", queues=1)
    with SyncRemotingClient(br.addr, timeout=10) as c:
        for i in range(20):
            assert send(c, "DI", b"m%d" % i, keys=f"k{i % 2}").code == 0
        assert wait_for(lambda: "indexing held back" in br.log(), 10)
        for i in range(20, 30):                                          # still accepting
            assert send(c, "DI", b"m%d" % i, keys=f"k{i % 2}").code == 0
        assert query_key(c, "DI", "k1") == []
        assert wait_value(port, "shmq_index_held_back", 1)[1] == 1
        fault_file.clear()
        want = sorted(b"m%d" % i for i in range(1, 30, 2))
        assert wait_for(lambda: query_key(c, "DI", "k1") == want, 15), query_key(c, "DI", "k1")
        assert send(c, "DI", b"m30", keys="k0").code == 0
        assert wait_for(lambda: b"m30" in query_key(c, "DI", "k0"), 10)
        assert len(drain(c, "DI")) == 31
        assert wait_value(port, "shmq_index_held_back", 0)[1] == 0
    log = br.log()
    assert log.count("indexing held back") == 1 and "indexing resumed" in log
    assert "Traceback" not in log
