"""Imported at start-up by every process of tests/powerloss/broken_broker.py (see there):
the worker's SYNC_FLUSH wait (broker/worker/confirm.py, Confirmer.wait, which the send
processor awaits before SEND_OK) answers at once instead of after the group-commit msync."""
import os

if os.environ.get("SHMQ_POWERLOSS_BROKEN") == "answer-before-flush":
    import asyncio

    from shmq.broker.worker import confirm

    def _answer_before_flush(self, end):
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(None)
        return fut

    confirm.Confirmer.wait = _answer_before_flush
