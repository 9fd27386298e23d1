"""Timer messages in the store: the write-path rule (RocketMQ 5's TIMER_* properties), the
wheel firing never early and once, recalls, recovery from a crash between a re-put and its
state byte, and a timer outliving the CommitLog file it was stored in."""
import os

import pytest

from shmq.errors import InvalidMessage
from shmq.native import lib
from shmq.store import MessageStore
from shmq.store import timer_marks as tm
from shmq.store.cleanup import CleanupService
from shmq.store import timer_rules as tr
from shmq.store.delay_levels import DEFAULT_LEVELS
from shmq.store.put import PutPipeline, PutRequest
from shmq.message.record import decode_record
from shmq.store.timer_index import TimerIndex
from shmq.store.timer_store import TimerStore

from ..conftest import small_config


class Clock:
    def __init__(self):
        self.t = lib.shmq_now_ms()

    def __call__(self):
        return self.t


@pytest.fixture
def env(store_root):
    live = []

    def _open(**kw):
        s = MessageStore.open(small_config(store_root, **kw), tag_code=DEFAULT_LEVELS.tag_code)
        p = PutPipeline(s, "C")
        clock = Clock()
        ts = TimerStore(s, p.put_inner, now=clock)
        ts.open()
        live.append((s, ts))
        return s, p, ts, clock

    def _close():
        while live:
            s, ts = live.pop()
            ts.close()
            s.close()

    _open.close = _close
    yield _open
    _close()


def send(p, topic="T", body=b"x", **props):
    return p.put(PutRequest(topic, body, {k: str(v) for k, v in props.items()}, queue_id=0, write_queues=1))


def delivered(s, topic="T"):
    got = s.get_messages(topic, 0, 0, max_count=10_000)
    return [decode_record(m, copy=True) for m in got.messages]


def test_rule_rewrites_to_timer_topic_with_due_time():
    now = 1_000_000
    props = {tr.P_TIMER_DELAY_MS: "1500"}
    assert tr.rewrite("T", 3, props, now) == (tr.TIMER_QID, now + 1500)
    assert props[tr.P_TIMER_OUT_MS] == str(now + 1500)
    assert props["REAL_TOPIC"] == "T" and props["REAL_QID"] == "3"
    # DELAY_SEC wins over DELAY_MS wins over DELIVER_MS (transformTimerMessage's order)
    assert tr.due_ms({tr.P_TIMER_DELAY_SEC: "2", tr.P_TIMER_DELAY_MS: "5", tr.P_TIMER_DELIVER_MS: "9"}, now) == now + 2000
    # precision rounds up, never early
    s = tr.TimerSettings(precision_ms=1000)
    assert tr.rewrite("T", 0, {tr.P_TIMER_DELIVER_MS: str(now + 1)}, now, s)[1] == now + 1000


def test_rule_bad_input():
    now = 1_000_000
    assert tr.rewrite("T", 0, {tr.P_TIMER_DELIVER_MS: str(now - 5)}, now) is None  # past: plain, now
    with pytest.raises(InvalidMessage, match="timer message illegal"):
        tr.rewrite("T", 0, {tr.P_TIMER_DELAY_SEC: str(tr.DEFAULT_MAX_DELAY_SEC + 1)}, now)
    with pytest.raises(InvalidMessage, match="not an integer"):
        tr.rewrite("T", 0, {tr.P_TIMER_DELAY_MS: "soon"}, now)
    with pytest.raises(InvalidMessage):
        tr.rewrite("T", 0, {tr.P_TIMER_DEL_UNIQKEY: "T+x", tr.P_TIMER_DELIVER_MS: str(now)}, now)
    with pytest.raises(Exception, match="timerWheelEnable is false"):
        tr.rewrite("T", 0, {tr.P_TIMER_DELAY_MS: "5"}, now, tr.TimerSettings(enable=False))


def test_index_orders_and_rolls():
    ix = TimerIndex()
    for ms, off in [(5000, 1), (1200, 2), (1100, 3), (9000, 4)]:
        ix.add(ms, off)
    assert ix.pop_due(1150) == [(1100, 3)]
    ix.add(1000, 5)   # an overdue arrival goes straight to the due heap
    assert ix.pop_due(1300) == [(1000, 5), (1200, 2)]
    assert sorted(ix.take_below(4)) == [(5000, 1)]
    assert len(ix) == 1 and ix.pop_due(10_000) == [(9000, 4)]


def test_pipeline_stores_timer_invisible_then_fires_once(env):
    s, p, ts, clock = env()
    r = send(p, body=b"hello", TIMER_DELAY_MS=2000, KEYS="k1")
    assert r.stored_topic == tr.TIMER_TOPIC and r.deliver_ms == clock.t + 2000 or r.deliver_ms >= clock.t + 2000
    assert delivered(s) == []
    ts.ingest()
    clock.t = r.deliver_ms - 1
    assert ts.fire_due() == 0 and delivered(s) == []      # never early
    clock.t = r.deliver_ms
    assert ts.fire_due() == 1
    (m,) = delivered(s)
    assert bytes(m.body) == b"hello" and m.properties["KEYS"] == "k1"
    assert m.properties[tr.P_TIMER_OUT_MS] == str(r.deliver_ms)
    assert "REAL_TOPIC" not in m.properties and m.properties[tr.P_TIMER_SRC] == f"0:{r.queue_offset}"
    clock.t += 10_000
    ts.ingest()
    assert ts.fire_due() == 0 and len(delivered(s)) == 1


def test_past_and_refused_sends_store_accordingly(env):
    s, p, ts, clock = env()
    send(p, TIMER_DELIVER_MS=1)                            # in the past: stored in T now
    assert len(delivered(s)) == 1
    before = s.commit_pos
    with pytest.raises(InvalidMessage):
        send(p, TIMER_DELAY_MS="abc")
    with pytest.raises(InvalidMessage):
        send(p, TIMER_DELAY_SEC=10 ** 9)
    assert s.commit_pos == before                          # nothing stored


def test_recall_cancels_before_due(env):
    s, p, ts, clock = env()
    keep = send(p, body=b"keep", TIMER_DELAY_MS=1000, UNIQ_KEY="U1")
    gone = send(p, body=b"gone", TIMER_DELAY_MS=1000, UNIQ_KEY="U2")
    p.put(PutRequest("T", b"0", {tr.P_TIMER_DEL_UNIQKEY: tr.delete_key("T", "U2"),
                                 tr.P_TIMER_DELIVER_MS: str(gone.deliver_ms + 1)}, queue_id=0, write_queues=1))
    ts.ingest()
    clock.t = gone.deliver_ms + 5
    ts.fire_due()
    assert [bytes(m.body) for m in delivered(s)] == [b"keep"]
    assert ts.cancelled_count == 1 and not ts.cancelled    # the marker is spent
    assert keep.deliver_ms


def test_crash_between_reput_and_state_byte_delivers_once(env):
    """The state byte of a re-put is written only after the flush; a 'crash' before it must
    not fire the timer again: the restart finds the re-put by its SHMQ_TIMER_SRC."""
    s, p, ts, clock = env()
    rs = [send(p, body=b"%d" % i, TIMER_DELAY_MS=100 + i) for i in range(20)]
    ts.ingest()
    clock.t = max(r.deliver_ms for r in rs[:10])
    assert ts.fire_due() == 10
    # no settle, no checkpoint: as if killed right after the re-puts
    s.flush()
    env.close()
    s, p, ts, clock = env()
    assert len(ts.index) == 10
    clock.t += 10_000
    ts.fire_due()
    bodies = sorted(int(bytes(m.body)) for m in delivered(s))
    assert bodies == list(range(20))


def test_checkpoint_survives_restart(env):
    s, p, ts, clock = env()
    rs = [send(p, TIMER_DELAY_MS=50 + i) for i in range(5)]
    ts.ingest()
    clock.t = rs[2].deliver_ms
    ts.fire_due()
    s.flush()
    ts.checkpoint()
    ck = ts.marks.load_checkpoint()
    assert ck.low[0] == 3 and ck.scan_from == s.commit_pos
    env.close()
    s, p, ts, clock = env()
    assert len(ts.index) == 2


def test_damaged_checkpoint_is_ignored(env, store_root):
    s, p, ts, clock = env()
    send(p, TIMER_DELAY_MS=50)
    ts.ingest()
    ts.checkpoint()
    env.close()
    path = os.path.join(str(store_root), tm.DIR, "checkpoint")
    with open(path, "r+b") as f:
        f.seek(9)
        f.write(b"\xff")
    with open(path, "rb") as f:
        assert tm.TimerCheckpoint.decode(f.read()) is None
    s, p, ts, clock = env()
    assert len(ts.index) == 1


def test_timer_outlives_its_commitlog_file(env):
    """A timer due after its file expired: the cleanup asks the wheel first, which rolls the
    timer into the current file; after the old file is gone it still fires, once."""
    s, p, ts, clock = env(file_reserved_time_hours=0)
    far = send(p, body=b"far", TIMER_DELAY_SEC=3600)
    ts.ingest()
    guard_calls = []

    def guard(end):
        guard_calls.append(end)
        ts.ingest()
        ts.roll_below(end)
        s.flush()
        return True

    s.add_expiry_guard(guard)
    for i in range(300):                                   # fill several 64 KiB files
        send(p, topic="Fill", body=b"z" * 900)
    first_file = far.phys_offset // s.commitlog.file_size
    deleted = CleanupService(s).delete_expired()
    assert first_file in deleted and guard_calls
    assert s.read_at(far.phys_offset) is None              # the original record is gone
    ts.ingest()
    clock.t = far.deliver_ms
    assert ts.fire_due() == 1
    (m,) = delivered(s)
    assert bytes(m.body) == b"far" and m.properties[tr.P_TIMER_ROLL_TIMES] == "1"
    assert ts.rolled == 1



def test_timer_service_rolls_before_the_cleanup_deletes(store_root):
    """The supervisor's TimerService as the cleanup's guard: the file holding a pending timer
    is deleted only after the service re-appended it, and the timer still fires, once."""
    import time

    from shmq.broker.supervisor.timer_service import TimerService
    s = MessageStore.open(small_config(store_root, file_reserved_time_hours=0), tag_code=DEFAULT_LEVELS.tag_code)
    p = PutPipeline(s, "C")
    svc = TimerService(s, p)
    svc.start()
    try:
        r = send(p, body=b"late", TIMER_DELAY_MS=2500)
        for _ in range(300):
            send(p, topic="Fill", body=b"z" * 900)
        deleted = CleanupService(s).delete_expired()
        assert r.phys_offset // s.commitlog.file_size in deleted
        assert svc.timers.rolled == 1
        deadline = time.monotonic() + 15
        while not delivered(s) and time.monotonic() < deadline:
            time.sleep(0.05)
        (m,) = delivered(s)
        assert bytes(m.body) == b"late" and m.store_timestamp >= r.deliver_ms
    finally:
        svc.stop()
        s.close()


def test_batch_with_timer_properties_is_refused(env):
    from shmq.message.batch import encode_batch
    s, p, ts, clock = env()
    body = encode_batch([(b"a", b"", 0)])
    with pytest.raises(InvalidMessage, match="timer"):
        p.put(PutRequest("T", body, {tr.P_TIMER_DELAY_MS: "500"}, queue_id=0, write_queues=1, batch=True))


def _counted_timer_service(store_root, max_wait):
    """A started TimerService on a fresh store that notes the time of each of its rounds."""
    import time

    from shmq.broker.supervisor.timer_service import TimerService
    s = MessageStore.open(small_config(store_root), tag_code=DEFAULT_LEVELS.tag_code)
    p = PutPipeline(s, "C")
    rounds = []

    class Counted(TimerService):
        def round(self):
            rounds.append(time.monotonic())
            return super().round()

    svc = Counted(s, p, max_wait=max_wait)
    svc.start()
    return s, p, svc, rounds


def test_timer_service_sleeps_through_plain_appends_and_wakes_for_a_timer(store_root):
    """The timer service sleeps on the timer topic's own futex word: a stream of plain appends
    (a local producer's) wakes it not once, and a timer appended meanwhile is still taken in at
    once and fires on time (max_wait is 3 s here, so only that wake-up explains a delivery
    within 2 s)."""
    import threading
    import time

    s, p, svc, rounds = _counted_timer_service(store_root, max_wait=3.0)
    stop = threading.Event()

    def plain():
        while not stop.is_set():
            send(p, topic="Plain", body=b"p" * 100)
            time.sleep(0.0005)

    t = threading.Thread(target=plain)
    try:
        deadline = time.monotonic() + 5
        while not rounds and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)
        t.start()
        before = len(rounds)
        time.sleep(0.5)
        assert len(rounds) == before, f"{len(rounds) - before} timer rounds woken by plain appends"
        r = send(p, body=b"soon", TIMER_DELAY_MS=300)
        deadline = time.monotonic() + 2
        while not delivered(s) and time.monotonic() < deadline:
            time.sleep(0.01)
        (m,) = delivered(s)
        assert bytes(m.body) == b"soon" and m.store_timestamp >= r.deliver_ms
        assert len(rounds) - before <= 4  # its ingest, its firing (and the min_wait after a wake)
    finally:
        stop.set()
        if t.is_alive():
            t.join()
        svc.stop()
        s.close()


def test_timer_service_stop_and_wake_end_its_sleep(store_root):
    """With nothing due the service sleeps max_wait on the timer futex (no polling); stop() and
    wake() end that sleep through shmq_wake_timer instead of waiting it out (30 s here)."""
    import time

    s, p, svc, rounds = _counted_timer_service(store_root, max_wait=30.0)
    try:
        deadline = time.monotonic() + 5
        while not rounds and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert len(rounds) == 1  # asleep, not polling
        svc.wake()
        deadline = time.monotonic() + 10
        while len(rounds) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert len(rounds) >= 2
        t0 = time.monotonic()
        assert svc.stop(timeout=10)
        assert time.monotonic() - t0 < 10
    finally:
        svc.stop()
        s.close()
