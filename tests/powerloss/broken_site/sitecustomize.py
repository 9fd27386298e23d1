"""Imported at start-up by every process of tests/powerloss/broken_broker.py (see there):
the worker's SYNC_FLUSH wait (broker/worker/confirm.py, Confirmer.add, through which the send
processor answers SEND_OK) answers at once instead of after the group-commit msync."""
import os

if os.environ.get("SHMQ_POWERLOSS_BROKEN") == "answer-before-flush":
    from shmq.broker.worker import confirm

    def _answer_before_flush(self, end, answer, arg):
        answer(arg, None)

    confirm.Confirmer.add = _answer_before_flush
