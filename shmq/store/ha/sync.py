"""The SYNC_MASTER wait: the one place a put waits for a slave (the broker's send path, the
store's own put and QueueWriter, and local producers all come here), as SYNC_FLUSH putters
wait for the flusher. Group commit: the HA service raises one replicated position for every
slave report, and every putter below it is released at once (shmq_wait_replicated)."""
from __future__ import annotations

from shmq.errors import ReplicationError
from shmq.native import lib

from ..appender import raise_for_status


def wait_replicated(ctl, end: int, timeout_ns: int, result=None) -> None:
    """SYNC_MASTER: return once a slave has every byte below ``end`` (RocketMQ's handleHA).
    No slave connected, or the best one more than haSlaveFallbehindMax behind: at once
    SLAVE_NOT_AVAILABLE (11); no acknowledgement within syncFlushTimeout: FLUSH_SLAVE_TIMEOUT
    (12). The message is stored either way (the exception carries ``result``)."""
    p = ctl.pos
    if p.repl_pos >= end:
        return
    if p.repl_slaves == 0 or end - p.repl_pos >= ctl.owner.ha_fallbehind_max:
        raise ReplicationError("slave not available", code=11, result=result)
    rc = lib.shmq_wait_replicated(ctl, end, timeout_ns)
    if rc == lib.SHMQ_ETIMEDOUT:
        raise ReplicationError(f"no slave confirmed within {timeout_ns // 1_000_000} ms", code=12, result=result)
    if rc == lib.SHMQ_ESLAVE:  # the last slave went away while we waited
        raise ReplicationError("slave not available (disconnected)", code=11, result=result)
    if rc:
        raise_for_status(rc)


__all__ = ["wait_replicated"]
