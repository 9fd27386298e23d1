"""Every shmq-bench adapter moves 1,000 messages intact between separate processes (count
mode: every body checked for length, padding and duplicates). Redis is skipped only when
redis-server is not installed; the shmq client rows only when the client or broker is not."""
from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("hdrh")

from shmq.bench import engine
from shmq.bench.peers import PEERS, SHMQ
from shmq.bench.scenarios import make

from .bench_env import check_intact, env  # noqa: F401  (a fixture, used by name)

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("name", ["mpqueue", "faster-fifo", "zmq", "redis"])
def test_peer_moves_1000_messages(env, name):
    if name == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    sc = make("produce", count=1000, size=128)
    r = engine.run(PEERS[name](), sc, env)
    check_intact(r, 1000)


@pytest.mark.parametrize("name", ["mpqueue", "faster-fifo", "zmq", "redis"])
def test_peer_batches_two_to_two(env, name):
    if name == "redis" and shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    sc = make("produce", count=1000, batch=16, producers=2, consumers=2)
    check_intact(engine.run(PEERS[name](), sc, env), 1000)


@pytest.mark.parametrize("batch", [1, 16])
def test_shmq_store_moves_1000_messages(env, batch):
    sc = make("produce", count=1000, batch=batch, producers=2, consumers=2)
    check_intact(engine.run(SHMQ["shmq-store"](), sc, env), 1000)


def test_shmq_store_sync_flush_and_pull(env):
    check_intact(engine.run(SHMQ["shmq-store"](), make("sync-flush", count=1000, producers=2), env), 1000)
    r = engine.run(SHMQ["shmq-store"](), make("pull", count=1000), env)
    assert r.status == "ok" and r.messages == 1000 and r.latency_us is None


def test_redis_sync_flush(env):
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed (Debian package redis-server)")
    check_intact(engine.run(PEERS["redis"](), make("sync-flush", count=1000, producers=2), env), 1000)


def test_peers_without_durability_skip_sync_flush(env):
    r = engine.run(PEERS["mpqueue"](), make("sync-flush", count=10), env)
    assert r.status == "skipped" and "durability" in r.note


@pytest.mark.parametrize("transport", ["local", "tcp"])
def test_shmq_client_moves_1000_messages(env, transport):
    r = engine.run(SHMQ["shmq"](), make("produce", count=1000, transport=transport), env)
    if r.status == "skipped":
        pytest.skip(r.note)
    check_intact(r, 1000)


def test_redis_skips_with_a_reason_without_redis_server(monkeypatch, env):
    import shmq.bench.peers.redis_streams as rs
    monkeypatch.setattr(rs.shutil, "which", lambda name: None)
    r = engine.run(rs.RedisPeer(), make("produce", count=10), env)
    assert r.status == "skipped" and "redis-server not found" in r.note


def test_pin_puts_each_slot_on_a_cpu_of_its_own_round_robin():
    """--pin: producer / consumer slot i goes onto the i-th CPU the process may use (round robin);
    os.sched_setaffinity(0) pins the calling thread, so each slot is tried in a thread of its own."""
    import threading

    from shmq.bench.engine import pin_to_cpu
    cpus = sorted(os.sched_getaffinity(0))
    got = {}

    def run(slot):
        got[slot] = (pin_to_cpu(slot), os.sched_getaffinity(0))

    for slot in (0, 1, len(cpus)):
        t = threading.Thread(target=run, args=(slot,))
        t.start()
        t.join()
    assert got[0] == (cpus[0], {cpus[0]}) and got[len(cpus)] == (cpus[0], {cpus[0]})
    assert got[1] == (cpus[1 % len(cpus)], {cpus[1 % len(cpus)]})
    assert sorted(os.sched_getaffinity(0)) == cpus  # this thread is not pinned
