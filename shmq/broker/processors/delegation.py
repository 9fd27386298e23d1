"""Call sites into the put pipeline's delay rewriting (``shmq/store/put.py``) and the retry
/ DLQ logic (``shmq/broker/retry.py``), which another engineer builds in parallel (issue 4
is split: this file is the seam).

PLACEHOLDER until those modules land: a DELAY property is stored as is (the message is
delivered at once), a %RETRY% send is stored to the retry topic as is, and
CONSUMER_SEND_MSG_BACK answers SYSTEM_ERROR "not available yet" (a push consumer then
retries the message locally). Each function returns None for "no rerouting; store the
message as sent", or a callable ``put(body, born_host, cluster_prop) -> PutResult``.
"""
from __future__ import annotations

from shmq.protocol import ResponseCode


def route_delay(worker, topic: str, queue_id: int, props: dict):
    # TODO(issue 4, delay): call shmq.store.put's delay rewrite (SCHEDULE_TOPIC_XXXX, queue
    # level-1, REAL_TOPIC/REAL_QID, tag code = due time) once it exists.
    return None


def route_retry(worker, header, queue_id: int, props: str):
    # TODO(issue 4, retry): a %RETRY% send with reconsumeTimes >= max goes to %DLQ% (retry.py).
    return None


def send_back(worker, conn, cmd):
    # TODO(issue 4, retry): delegate CONSUMER_SEND_MSG_BACK to shmq.broker.retry.
    return cmd.make_response(ResponseCode.SYSTEM_ERROR, "CONSUMER_SEND_MSG_BACK is not available yet")
