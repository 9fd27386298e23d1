"""The local consumer's C record walk (MessageStore.queue_reader -> shmq.native.hot_read) gives
the same MessageExt as the one decoder (message_from_view over get_messages), across
CommitLog and ConsumeQueue file boundaries, and stops where get_messages has to decide:
a compressed record, a record past the commit position, a record that does not check."""
import threading
import time
import zlib

from shmq.client.message import message_from_view
from shmq.message.layout import FLAG_COMPRESSED, R_MAGIC
from shmq.native import ffi, hot_read
from shmq.store import MessageStore

from ..conftest import small_config

def _addr(cdata) -> int:
    return int(ffi.cast("uintptr_t", cdata if ffi.typeof(cdata).kind == "pointer" else ffi.addressof(cdata)))


PROPS = {"TAGS": "A", "KEYS": "k1 k2", "UNIQ_KEY": "0A0B", "u": "v"}


def _store(root, n=250, size=700):
    store = MessageStore.open(small_config(root))  # 64 KiB logs, 100-entry CQ files: both roll
    for i in range(n):
        store.put("T", 1, bytes([i % 251]) * size, PROPS if i % 3 else {}, flag=i % 5,
                  born_host=("10.1.2.3", 4000 + i), reconsume_times=i % 4)
    return store


def _one_decoder(store, offset, count):
    res = store.get_messages("T", 1, offset, count, max_bytes=1 << 30)
    return [message_from_view(v, 0, "b1") for v in res.messages], res.next_begin_offset


def test_same_messages_as_the_one_decoder_across_file_boundaries(store_root):
    store = _store(store_root)
    try:
        reader = store.queue_reader("T", 1, "b1")
        got, pos = [], 0
        while pos < 250:
            msgs, nxt = reader.read(pos, 32)
            assert msgs and nxt == pos + len(msgs)
            want, _ = _one_decoder(store, pos, len(msgs))
            assert msgs == want
            got += msgs
            pos = nxt
        assert [m.queue_offset for m in got] == list(range(250))
        assert got[7].tags == "A" and got[7].keys == ["k1", "k2"] and got[7].born_host == ("10.1.2.3", 4007)
        assert got[6].properties == {} and got[6].msg_id == got[6].offset_msg_id
        assert reader.read(250, 32) == ([], 250)  # caught up
        assert store.queue_reader("T", 9) is None  # no such queue
    finally:
        store.close()


def test_stops_at_a_compressed_record_and_at_the_commit_position(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        for i in range(3):
            store.put("T", 1, b"plain %d" % i)
        store.put("T", 1, zlib.compress(b"z" * 1000), sysflag=FLAG_COMPRESSED)
        store.put("T", 1, b"after")
        reader = store.queue_reader("T", 1, "b1")
        msgs, nxt = reader.read(0, 32)
        assert [m.body for m in msgs] == [b"plain 0", b"plain 1", b"plain 2"] and nxt == 3
        assert reader.read(3, 32) == ([], 3)  # get_messages decompresses it
        cq = store.queues.get("T", 1).map(0)
        log = store.commitlog.map(0)
        # a commit position at the start of the third record: it is not read
        pos = ffi.new("shmq_positions *")
        pos.commit_pos, pos.min_pos = msgs[2].commit_log_offset, 0
        nxt = ffi.new("int64_t *", 5)
        only_two, used, _ = hot_read(cq, 0, 0, 5, log, 0, _addr(pos), _addr(nxt), "T", b"T", "b1")
        assert used == 2 and [m.body for m in only_two] == [b"plain 0", b"plain 1"]
        nxt[0] = 1  # and the queue's published next offset bounds it too
        assert hot_read(cq, 0, 0, 5, log, 0, _addr(store.cb.ctl.pos), _addr(nxt), "T", b"T", "b1")[1] == 1
    finally:
        store.close()


def test_stops_at_a_record_that_does_not_check(store_root):
    store = MessageStore.open(small_config(store_root))
    try:
        for i in range(3):
            store.put("T", 1, b"m%d" % i)
        msgs, _ = store.queue_reader("T", 1).read(0, 32)
        log = bytearray(store.commitlog.map(0)[:store.commit_pos])
        log[msgs[1].commit_log_offset + R_MAGIC] ^= 0xFF
        cq = store.queues.get("T", 1).map(0)
        nxt = ffi.new("int64_t *", 3)
        got, used, _ = hot_read(cq, 0, 0, 3, log, 0, _addr(store.cb.ctl.pos), _addr(nxt), "T", b"T", "b1")
        assert used == 1 and got[0].body == b"m0"
    finally:
        store.close()


def _records(store):
    """A matrix of records on queue 0 of T and of a retry topic: tags, keys, user properties,
    non-ASCII text and bytes, an empty body, a batch, a retry copy with its original topic."""
    from shmq.message.batch import encode_batch
    rows = [(b"plain", {}), (b"", {"TAGS": "only-tags"}), (b"\xff\x00\xfe", {"KEYS": "a b c"}),
            ("d\u00e9j\u00e0 \u2713".encode(), {"TAGS": "t\u00e9", "u": "\u00fcml\u00e4ut", "UNIQ_KEY": "0A0B"}),
            (b"x" * 3000, {"TAGS": "big", "KEYS": "k", "a": "1", "b": "2"})]
    for body, props in rows:
        store.put("T", 0, body, props, flag=7, born_host=("10.0.0.9", 77), reconsume_times=1)
    store.put_batch("T", 0, encode_batch([(b"b%d" % i, "TAGS\x01bt%d" % i, i) for i in range(4)]), {"KEYS": "batch"})
    store.put("%RETRY%g", 0, b"again", {"RETRY_TOPIC": "T", "TAGS": "r"}, reconsume_times=3)


def test_wait_read_answers_the_queue_and_the_same_messages_as_the_one_decoder(store_root):
    from shmq.native import wait_read
    store = MessageStore.open(small_config(store_root))
    try:
        _records(store)
        readers = [store.queue_reader("T", 0, "b1"), store.queue_reader("%RETRY%g", 0, "b1")]
        ptrs, offs = ffi.new("int64_t *[]", 2), ffi.new("int64_t[]", [0, 0])
        for i, r in enumerate(readers):
            ptrs[i] = store.max_offset_watch(r.topic, 0)
        seen, poke = ffi.new("int64_t[1]", [0]), ffi.new("int32_t[1]")

        def wait(start, states):
            return wait_read(_addr(store.cb.ctl), _addr(ptrs), _addr(offs), 2, start, _addr(seen), -1,
                             _addr(poke), 0, 0, int(0.05e9), states, 32, False, 0)
        assert wait(0, [readers[0].st, None]) == (0, None)  # the ConsumeQueue file is not mapped yet
        for r in readers:
            r.read(0, 1)  # the reader maps it: wait_read reads from then on
        states = [readers[0].st, readers[1].st]
        for q, (reader, count) in enumerate(zip(readers, (9, 1))):
            i, (msgs, nxt, elsewhere) = wait(q, states)
            assert (i, nxt, elsewhere, len(msgs)) == (q, count, -1, count)
            want = [message_from_view(v, 0, "b1")
                    for v in store.get_messages(reader.topic, 0, 0, 32, max_bytes=1 << 30).messages]
            if reader.topic.startswith("%RETRY%"):
                # the one decoder gives a retry copy its original topic back (RETRY_TOPIC); the C
                # walk does not, which is why a consumer never reads a retry topic through it
                # (ConsumerCore._local_plain): here every other field must still agree
                assert [m.topic for m in msgs] == ["%RETRY%g"] and [w.topic for w in want] == ["T"]
                msgs[0].topic = "T"
            assert msgs == want
            for m, w in zip(msgs, want):  # every field, not only what __eq__ compares
                assert (m.topic, m.body, m.tags, m.keys, m.properties, m.msg_id, m.queue_offset,
                        m.reconsume_times, m.born_host, m.store_host, m.flag, m.sysflag, m.born_timestamp,
                        m.store_timestamp, m.commit_log_offset) == \
                       (w.topic, w.body, w.tags, w.keys, w.properties, w.msg_id, w.queue_offset,
                        w.reconsume_times, w.born_host, w.store_host, w.flag, w.sysflag, w.born_timestamp,
                        w.store_timestamp, w.commit_log_offset)
        assert msgs[0].properties["RETRY_TOPIC"] == "T" and msgs[0].reconsume_times == 3
        assert wait(1, [None, None]) == (1, None)  # a queue without a state: answered, not read
        offs[0], offs[1] = 9, 1
        assert wait(0, states) == (-1, None)  # nothing new: the timeout
    finally:
        store.close()


def test_a_spinning_wait_read_lets_other_threads_run_and_sees_their_append(store_root):
    """wait_read(keep_gil=True) spins its first 200 us with the GIL held, then without it: a
    Python thread beside it keeps running through a long spin (never starved by it), and its
    append is answered by it."""
    from shmq.native import wait_read
    store = MessageStore.open(small_config(store_root))
    try:
        store.put("T", 0, b"first", {})
        reader = store.queue_reader("T", 0, "b1")
        reader.read(0, 1)  # mapped: wait_read reads from then on
        ptrs, offs = ffi.new("int64_t *[]", 1), ffi.new("int64_t[]", [1])
        ptrs[0] = store.max_offset_watch("T", 0)
        seen, poke = ffi.new("int64_t[1]", [store.commit_pos]), ffi.new("int32_t[1]")
        ticks, stop = [0], threading.Event()

        def beside():  # a thread that needs the GIL now and then (as a client's loop thread)
            while not stop.is_set():
                time.sleep(0.001)
                ticks[0] += 1
                if ticks[0] == 20:
                    store.put("T", 0, b"second", {})

        t = threading.Thread(target=beside)
        t.start()
        try:
            i, (msgs, nxt, elsewhere) = wait_read(_addr(store.cb.ctl), _addr(ptrs), _addr(offs), 1, 0, _addr(seen),
                                                  -1, _addr(poke), 0, int(30e9), int(30e9), [reader.st], 32, True, 0)
            at_answer = ticks[0]
            offs[0] = nxt
            assert wait_read(_addr(store.cb.ctl), _addr(ptrs), _addr(offs), 1, 0, _addr(seen), -1, _addr(poke), 0,
                             int(0.3e9), int(0.3e9), [reader.st], 32, True, 0) == (-1, None)  # spun to its timeout
        finally:
            stop.set()
            t.join()
        assert (i, [m.body for m in msgs], nxt, elsewhere) == (0, [b"second"], 2, -1)
        assert at_answer >= 20 and ticks[0] > at_answer  # it ran during both spins
    finally:
        store.close()


def test_wait_read_spins_only_while_its_news_comes_within_the_spin(store_root):
    """The spin adapts to the gaps (native/hot.c): a wait spins only when its thread's previous
    wait found news within 1.5x the spin. After an answer at once it spins (CPU through the
    whole wait); after a timeout, or news later than that, it sleeps at once (no CPU). The
    answers are the same either way."""
    from shmq.native import wait_read
    store = MessageStore.open(small_config(store_root))
    out = {}
    try:
        store.put("T", 0, b"first", {})
        reader = store.queue_reader("T", 0, "b1")
        reader.read(0, 1)  # mapped: wait_read reads from then on
        ptrs, offs = ffi.new("int64_t *[]", 1), ffi.new("int64_t[]", [0])
        ptrs[0] = store.max_offset_watch("T", 0)
        seen, poke = ffi.new("int64_t[1]", [0]), ffi.new("int32_t[1]")

        def wait(spin_s, timeout_s):  # (queue, bodies, CPU seconds of this thread in the wait)
            cpu = time.thread_time()
            i, got = wait_read(_addr(store.cb.ctl), _addr(ptrs), _addr(offs), 1, 0, _addr(seen), -1, _addr(poke),
                               0, int(spin_s * 1e9), int(timeout_s * 1e9), [reader.st], 32, False, 0)
            cpu = time.thread_time() - cpu
            if got is not None:
                offs[0] = got[1]
            return i, [m.body for m in got[0]] if got else None, cpu

        def waits():  # a fresh thread: the gap is remembered per thread
            out["first"] = wait(0.3, 0.3)   # news already there: answered at once
            out["spun"] = wait(0.3, 0.3)    # so this one spins, to its timeout
            out["slept"] = wait(0.3, 0.3)   # after a timeout: sleeps
            threading.Timer(0.25, store.put, ("T", 0, b"late", {})).start()
            out["late"] = wait(0.1, 5.0)    # news after 0.25 s, more than 1.5x the 0.1 s spin
            out["after_late"] = wait(0.1, 0.3)  # so this one sleeps too

        t = threading.Thread(target=waits)
        t.start()
        t.join(30)
        assert out["first"][:2] == (0, [b"first"]) and out["late"][:2] == (0, [b"late"]), out
        assert out["spun"][0] == -1 and out["spun"][2] > 0.03, out
        assert out["slept"][0] == -1 and out["slept"][2] < 0.03, out
        assert out["after_late"][0] == -1 and out["after_late"][2] < 0.03, out
    finally:
        store.close()


def test_wait_read_answers_changed_at_once_from_its_look_time_and_waits_before_it(store_root):
    """look_ns: a wait that starts at or after that CLOCK_MONOTONIC time answers -3 at once (the
    pull thread looks at its queue set again), with the GIL kept or not; before it, the wait
    answers the news, or times out, as without one."""
    from shmq.native import wait_read
    store = MessageStore.open(small_config(store_root))
    try:
        store.put("T", 0, b"first", {})
        reader = store.queue_reader("T", 0, "b1")
        reader.read(0, 1)
        ptrs, offs = ffi.new("int64_t *[]", 1), ffi.new("int64_t[]", [0])
        ptrs[0] = store.max_offset_watch("T", 0)
        seen, poke = ffi.new("int64_t[1]", [0]), ffi.new("int32_t[1]")

        def wait(look_ns, keep=False, timeout_s=5.0):
            t = time.monotonic()
            r = wait_read(_addr(store.cb.ctl), _addr(ptrs), _addr(offs), 1, 0, _addr(seen), -1, _addr(poke), 0,
                          0, int(timeout_s * 1e9), [reader.st], 32, keep, look_ns)
            return r, time.monotonic() - t
        for keep in (False, True):
            (r, took) = wait(time.monotonic_ns() - 1, keep)
            assert r == (-3, None) and took < 1.0  # past its look time: no wait, news or not
        (i, (msgs, nxt, _)), _ = wait(time.monotonic_ns() + int(60e9))
        assert (i, [m.body for m in msgs], nxt) == (0, [b"first"], 1)
        offs[0] = 1
        r, took = wait(time.monotonic_ns() + int(60e9), timeout_s=0.1)
        assert r == (-1, None) and took >= 0.09    # before it: the timeout, as with none
    finally:
        store.close()


def test_a_wait_read_under_a_flood_lingers_so_its_read_takes_what_came_meanwhile(store_root):
    """native/hot_wait.c's linger: a wait that answers a queue with fewer than half a read's worth
    of news, right after another answer (back to back) and with that queue's news coming at one
    entry per linger or faster, first sleeps the linger with the GIL dropped: what another thread
    appends meanwhile is in the same read. Half a read or more, a read of one message, or slow news
    (few entries over a long time): no linger. The answers are the same queue either way."""
    from shmq.native import _hot, wait_read
    store = MessageStore.open(small_config(store_root))
    out = {}
    try:
        store.put("T", 0, b"a", {})
        reader = store.queue_reader("T", 0, "b1")
        reader.read(0, 1)  # mapped: wait_read reads from then on
        ptrs, offs = ffi.new("int64_t *[]", 1), ffi.new("int64_t[]", [0])
        ptrs[0] = store.max_offset_watch("T", 0)
        seen, poke = ffi.new("int64_t[1]", [0]), ffi.new("int32_t[1]")

        def wait(max_count=32):  # (bodies, lingers of this thread after it)
            i, got = wait_read(_addr(store.cb.ctl), _addr(ptrs), _addr(offs), 1, 0, _addr(seen), -1, _addr(poke),
                               0, 0, int(5e9), [reader.st], max_count, False, 0)
            assert i == 0 and got is not None
            offs[0] = got[1]
            return [m.body for m in got[0]], _hot.linger_tune(0, 0)

        def waits():  # a fresh thread: the gaps and the lingers are counted per thread
            _hot.linger_tune(int(10e9), int(0.3e9))  # back to back: within 10 s; linger 300 ms
            out["first"] = wait()  # the queue's first answer: nothing to measure its news by
            store.put("T", 0, b"b", {})
            threading.Timer(0.05, store.put, ("T", 0, b"c", {})).start()
            out["lingered"] = wait()  # 1 new entry < 16: sleeps 300 ms, and c comes meanwhile
            for k in range(20):
                store.put("T", 0, b"d%d" % k, {})
            out["half_full"] = wait()  # 20 >= 16: read at once
            store.put("T", 0, b"e", {})
            out["one_at_a_time"] = wait(max_count=1)  # a read of one: never lingers
            _hot.linger_tune(0, 1000)  # a 1 us linger: one entry in the 50 ms since is slow news
            time.sleep(0.05)
            store.put("T", 0, b"f", {})
            out["slow"] = wait()

        t = threading.Thread(target=waits)
        try:
            t.start()
            t.join(30)
        finally:
            _hot.linger_tune(-1, -1)
        assert out["first"] == ([b"a"], 0), out
        assert out["lingered"] == ([b"b", b"c"], 1), out
        assert out["half_full"] == ([b"d%d" % k for k in range(20)], 1), out
        assert out["one_at_a_time"] == ([b"e"], 1), out
        assert out["slow"] == ([b"f"], 1), out
    finally:
        store.close()
