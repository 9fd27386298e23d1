"""A worker's SYNC_FLUSH confirm wait (broker/worker/confirm.py) after its store is closed: the
loop still runs callbacks then (asyncio.Runner's clean-up after the worker's shutdown), and the
bridge's wake-up read the unmapped control block: SIGSEGV, the process gone without a Python
traceback (a pytest-xdist worker lost in test_pull_fast.py's SYNC_FLUSH test, session 12). Run
in a child: the failure it guards against kills the process."""
import subprocess
import sys
import textwrap

import posix_ipc

from shmq.store.control import segment_name

from ..conftest import REPO

CHILD = textwrap.dedent("""
    import asyncio, sys, time
    from shmq.broker.worker.confirm import Confirmer
    from shmq.store import SYNC_FLUSH, MessageStore
    from tests.conftest import small_config

    answers = []

    async def main():
        store = MessageStore.open(small_config(sys.argv[1], flush_disk_type=SYNC_FLUSH))
        store.put("T", 0, b"m")
        c = Confirmer(store, asyncio.get_running_loop())
        c.add(store.cb.ctl.pos.flushed_pos, lambda arg, outcome: answers.append(outcome), None)
        await asyncio.sleep(0)  # the turn's end: the flush asked for, the bridge armed
        time.sleep(0.5)         # the bridge writes its eventfd; the loop does not look yet
        store.close()
        await asyncio.sleep(0.05)  # the loop reads the eventfd after the close

    asyncio.run(main())
    print("answers", answers)
""")


def test_a_confirm_wake_up_after_the_store_closed_is_ignored(tmp_path):
    root = str(tmp_path / "store")
    try:
        r = subprocess.run([sys.executable, "-c", CHILD, root], cwd=REPO, capture_output=True, text=True, timeout=60)
    finally:
        try:
            posix_ipc.unlink_shared_memory(segment_name(root))
        except posix_ipc.ExistentialError:
            pass
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "answers []"  # never answered: its connection is gone with the store
