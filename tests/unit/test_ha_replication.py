"""Replication between two stores in one process over real sockets: the HA wire codec, the
master's HA service, the slave's HA client and replica writer, and a fake peer speaking the
protocol by hand (a slave lying about its offset, a master sending bad frames)."""
from __future__ import annotations

import socket
import struct
import time

import posix_ipc
import pytest

from shmq.errors import SlaveStore
from shmq.native import lib
from shmq.store import MessageStore
from shmq.store.config import ROLE_SLAVE
from shmq.store.control import segment_name
from shmq.store.ha import HAClient, HAService
from shmq.store.ha.wire import FrameReader, HAProtocolError, ReportReader, frame_header, report
from tests.conftest import small_config


def wait_for(cond, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def stores(tmp_path):
    opened = []

    def _open(name, **kw):
        root = tmp_path / name
        s = MessageStore.open(small_config(root, **kw))
        opened.append((s, root))
        return s

    yield _open
    for s, root in reversed(opened):
        try:
            s.close()
        except Exception:
            pass
        try:
            posix_ipc.unlink_shared_memory(segment_name(str(root)))
        except posix_ipc.ExistentialError:
            pass


def bodies_of(store, topic, qid):
    out, off = [], 0
    while True:
        r = store.get_messages(topic, qid, off, 32)
        if not r.messages:
            return out
        from shmq.message.record import decode_record
        out += [decode_record(m).body for m in r.messages]
        off = r.next_begin_offset


# ---------------------------------------------------------------------------- codec ----
def test_wire_codec_splits_and_joins():
    fr = FrameReader()
    stream = frame_header(100, 3) + b"abc" + frame_header(103, 0) + frame_header(103, 2) + b"de"
    got = []
    for i in range(len(stream)):
        got += fr.feed(stream[i:i + 1])
    assert got == [(100, b"abc"), (103, b""), (103, b"de")]
    rr = ReportReader()
    assert rr.feed(report(5)[:3]) is None
    assert rr.feed(report(5)[3:] + report(9) + report(12)[:4]) == 9
    with pytest.raises(HAProtocolError):
        FrameReader().feed(struct.pack(">qi", 0, -1))
    with pytest.raises(HAProtocolError):
        FrameReader(max_body=10).feed(struct.pack(">qi", 0, 11))


# ---------------------------------------------------------------------------- streaming ----
def test_slave_follows_master_across_files_and_refuses_puts(stores):
    master = stores("m")
    ha = HAService(master, "127.0.0.1", 0, heartbeat_ms=200)
    ha.start()
    slave = stores("s", broker_role=ROLE_SLAVE)
    client = HAClient(slave, f"127.0.0.1:{ha.port}", heartbeat_ms=200)
    client.start()
    # an empty slave is streamed from the start of the master's last file (RocketMQ's rule):
    # connect it before the log grows past the first file
    wait_for(lambda: master.cb.ctl.pos.repl_slaves == 1, what="slave to connect")
    try:
        sent = [f"m-{i}".encode() * 50 for i in range(600)]  # ~200 KiB: several 64 KiB files
        for i, b in enumerate(sent):
            master.put("T", i % 2, b, {"KEYS": f"k{i}"})
        wait_for(lambda: slave.commit_pos == master.commit_pos, what="slave to catch up")
        assert bodies_of(slave, "T", 0) == sent[0::2]
        assert bodies_of(slave, "T", 1) == sent[1::2]
        assert slave.max_offset("T", 0) == master.max_offset("T", 0)
        # the slave's own index dispatcher indexed what it received (query by key)
        assert slave.dispatcher.wait_until(slave.commit_pos)
        from shmq.message.record import decode_record
        assert [decode_record(r).body for r in slave.query_by_key("T", "k7")] == [sent[7]]
        # the replicated bytes are the master's, byte for byte
        fsize = master.commitlog.file_size
        for idx in master.commitlog.file_indexes():
            end = min(fsize, master.commit_pos - idx * fsize)
            if end > 0:
                assert bytes(slave.commitlog.map(idx)[:end]) == bytes(master.commitlog.map(idx)[:end])
        with pytest.raises(SlaveStore):
            slave.put("T", 0, b"x")
        wait_for(lambda: master.cb.ctl.pos.repl_pos == master.commit_pos, what="acknowledgement")
    finally:
        client.stop()
        ha.stop()


def test_slave_resumes_from_its_own_offset_after_restart(stores, tmp_path):
    master = stores("m")
    ha = HAService(master, "127.0.0.1", 0, heartbeat_ms=200)
    ha.start()
    try:
        slave = stores("s", broker_role=ROLE_SLAVE)
        client = HAClient(slave, f"127.0.0.1:{ha.port}", heartbeat_ms=200)
        client.start()
        wait_for(lambda: master.cb.ctl.pos.repl_slaves == 1, what="slave to connect")
        for i in range(50):
            master.put("T", 0, b"a%d" % i)
        wait_for(lambda: slave.commit_pos == master.commit_pos)
        client.stop()
        slave.close()
        for i in range(50):
            master.put("T", 0, b"b%d" % i)
        slave = MessageStore.open(small_config(tmp_path / "s", broker_role=ROLE_SLAVE))
        try:
            client = HAClient(slave, f"127.0.0.1:{ha.port}", heartbeat_ms=200)
            assert client.replica.received > 0
            client.start()
            wait_for(lambda: slave.commit_pos == master.commit_pos)
            assert bodies_of(slave, "T", 0) == [b"a%d" % i for i in range(50)] + [b"b%d" % i for i in range(50)]
            client.stop()
        finally:
            slave.close()
    finally:
        ha.stop()


# ---------------------------------------------------------------------------- fake peers ----
def _fake_slave(port: int, offset: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(report(offset))
    return s


def test_fake_slave_reporting_beyond_the_master_never_acknowledges_early(stores):
    master = stores("m")
    for i in range(10):
        master.put("T", 0, b"x" * 100)
    ha = HAService(master, "127.0.0.1", 0, heartbeat_ms=200)
    ha.start()
    try:
        s = _fake_slave(ha.port, master.commit_pos)  # a valid start: the end of the log
        wait_for(lambda: master.cb.ctl.pos.repl_slaves == 1, what="slave to count")
        s.sendall(report(1 << 40))  # a lie: far past anything sent
        end = master.put("T", 0, b"y" * 100).end
        time.sleep(0.3)
        pos = master.cb.ctl.pos.repl_pos
        assert pos <= end
        # what it acknowledged counts only up to what was sent
        fr = FrameReader()
        got = 0
        s.settimeout(5)
        while got < end:
            for off, body in fr.feed(s.recv(65536)):
                got = max(got, off + len(body))
        s.sendall(report(1 << 40))
        wait_for(lambda: master.cb.ctl.pos.repl_pos == end)
        assert lib.shmq_wait_replicated(master.cb.ctl, end + 1, 50_000_000) == lib.SHMQ_ETIMEDOUT
        s.close()
    finally:
        ha.stop()


@pytest.mark.parametrize("where", ["past-end", "before-first", "mid-record"])
def test_slave_outside_the_masters_range_is_refused(stores, where, caplog):
    master = stores("m")
    for i in range(400):
        master.put("T", 0, b"z" * 300)
    master.commitlog.delete(0)  # as cleanup would: the log starts at the second file
    master.cb.ctl.pos.min_pos = master.commitlog.file_size
    ha = HAService(master, "127.0.0.1", 0, heartbeat_ms=200)
    ha.start()
    try:
        offset = {"past-end": master.commit_pos + 100, "before-first": 100,
                  "mid-record": master.commitlog.file_size * 2 + 7}[where]
        with caplog.at_level("ERROR", logger="shmq.store.ha"):
            s = _fake_slave(ha.port, offset)
            s.settimeout(5)
            assert s.recv(100) == b""  # closed without a byte of log
            wait_for(lambda: "refusing slave" in caplog.text)
        assert master.cb.ctl.pos.repl_slaves == 0
        s.close()
    finally:
        ha.stop()


def test_slave_closes_on_a_frame_for_the_wrong_offset(stores):
    slave = stores("s", broker_role=ROLE_SLAVE)
    srv = socket.create_server(("127.0.0.1", 0))
    client = HAClient(slave, f"127.0.0.1:{srv.getsockname()[1]}", heartbeat_ms=200)
    client.start()
    try:
        srv.settimeout(5)
        conn, _ = srv.accept()
        conn.settimeout(5)
        assert struct.unpack(">q", conn.recv(8))[0] == 0
        conn.sendall(frame_header(12345, 4) + b"abcd")  # not on a file boundary
        assert conn.recv(100) == b""  # the slave hung up
        assert slave.commit_pos == 0
        conn.close()
    finally:
        client.stop()
        srv.close()
