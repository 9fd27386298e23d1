"""shmq-bench's TCP send modes (--send-mode sync|async|oneway) and its tcp-limit row: every
mode moves every message intact between separate processes (count mode: each body checked
for length, padding and duplicates), the async window never has more than its bound
unanswered and a failed send fails the run, and the limit's frames survive being cut anywhere."""
from __future__ import annotations


import pytest

pytest.importorskip("hdrh")

from shmq.bench import engine, main as bench_main
from shmq.bench.peers import PEERS, SHMQ
from shmq.bench.peers.shmq_client import _AsyncWindow
from shmq.bench.peers.tcp_limit import MIN_FRAME, decode, encode
from shmq.bench.scenarios import make
from shmq.cli.bench import build_parser

from .bench_env import check_intact, env  # noqa: F401  (a fixture, used by name)

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("mode, batch", [("async", 1), ("async", 16), ("oneway", 1)])
def test_shmq_client_tcp_send_modes_deliver_every_message(env, mode, batch):
    r = engine.run(SHMQ["shmq"](), make("produce", count=1000, batch=batch, transport="tcp", send_mode=mode,
                                        send_window=64), env)
    check_intact(r, 1000)  # the client and broker are this project's: a skipped row is a failure


def test_tcp_limit_moves_1000_messages_and_batches_two_to_two(env):
    check_intact(engine.run(PEERS["tcp-limit"](), make("produce", count=1000, size=128), env), 1000)
    # two producers' frames interleave at the server: each is handed over whole
    check_intact(engine.run(PEERS["tcp-limit"](), make("produce", count=1000, batch=16, producers=2, consumers=2),
                            env), 1000)


def test_tcp_limit_paced_e2e_reports_latency_and_its_server_cpu(env):
    r = engine.run(PEERS["tcp-limit"](), make("e2e", rate=2000.0, duration=0.3, warmup=0.1), env)
    assert r.status == "ok", r.note
    assert r.latency_us["count"] > 0 and r.pacing_late_us is not None
    assert "broker" in r.cpu_us_per_msg  # the echo server's CPU, as a broker's


def test_tcp_limit_is_the_sync_limit_only(env):
    r = engine.run(PEERS["tcp-limit"](), make("e2e", send_mode="async", duration=0.2), env)
    assert r.status == "skipped" and "sync" in r.note


def test_limit_frames_decode_whole_however_the_stream_is_cut():
    bodies = [bytes([i]) * (i * 7 % 300) for i in range(40)]
    stream = encode(bodies[:1]) + encode(bodies[1:17]) + encode(bodies[17:])
    assert len(encode([b"x" * 100])) == MIN_FRAME  # one 100 B message: a 200-byte frame
    for step in (1, 3, 199, 1000):
        buf, got = bytearray(), []
        for at in range(0, len(stream), step):
            buf.extend(stream[at:at + step])
            got += decode(buf)
        assert got == bodies and not buf


class _Future:
    def __init__(self, log, error=None):
        self.finished, self.error, self.log = False, error, log

    def done(self):
        return self.finished

    def result(self, timeout=None):
        self.finished = True
        self.log.append("waited")
        if self.error:
            raise self.error
        return "ok"


class _FakeProducer:
    def __init__(self, fail_at=None):
        self.futures, self.log, self.fail_at = [], [], fail_at

    def send_async(self, msg):
        err = RuntimeError("broker refused") if len(self.futures) == self.fail_at else None
        self.futures.append(_Future(self.log, err))
        return self.futures[-1]

    send_batch_async = send_async

    def unanswered(self):
        return sum(not f.finished for f in self.futures)

    def shutdown(self):
        pass


def test_async_window_bounds_unanswered_sends_and_drain_waits_for_all():
    p = _FakeProducer()
    w = _AsyncWindow(p, "T", 4)
    most = 0
    for i in range(20):
        w.send(b"x" * 16)
        most = max(most, p.unanswered())
    assert most == 4  # the fifth send waited for the oldest first
    w.drain()
    assert p.unanswered() == 0


def test_async_window_a_failed_send_fails_the_run():
    p = _FakeProducer(fail_at=2)
    w = _AsyncWindow(p, "T", 2)
    with pytest.raises(RuntimeError, match="refused"):
        for _ in range(10):
            w.send(b"x" * 16)


def test_send_mode_options_and_their_checks():
    args = build_parser().parse_args(["e2e", "--transport", "tcp", "--send-mode", "async", "--send-window", "8"])
    (sc,) = bench_main.build_scenarios(args)
    assert (sc.send_mode, sc.send_window) == ("async", 8) and "async sends (window 8)" in sc.label
    assert make("e2e").send_mode == "sync"  # the default: RocketMQ's send(), one answer per call
    with pytest.raises(ValueError, match="oneway"):
        make("produce", send_mode="oneway", batch=4)
    with pytest.raises(ValueError, match="send mode"):
        make("produce", send_mode="later")
