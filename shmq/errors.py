"""The exception tree of shmq: one root, ``ShmqError``.

Every error a user can meet is a subclass with structured fields. Broker response
codes (RocketMQ's ``ResponseCode``) and C core status codes map to classes through the
two tables at the bottom, so a code is turned into an exception in exactly one place.
"""
from __future__ import annotations


class ShmqError(Exception):
    """Root of every shmq error. ``code`` is the RocketMQ response code when there is one."""

    code: int = 1  # SYSTEM_ERROR
    retriable: bool = False

    def __init__(self, message: str = "", *, code: int | None = None, remark: str | None = None):
        super().__init__(message or remark or self.__class__.__name__)
        if code is not None:
            self.code = code
        self.remark = remark if remark is not None else message


# ---- bad input: the caller's fault, nothing was changed -------------------------------
class InvalidMessage(ShmqError):
    """A message, topic or property that RocketMQ would refuse (MESSAGE_ILLEGAL)."""
    code = 13


class MessageTooLarge(InvalidMessage):
    def __init__(self, size: int, limit: int):
        super().__init__(f"message of {size} bytes exceeds maxMessageSize {limit}")
        self.size, self.limit = size, limit


class InvalidTopic(InvalidMessage):
    def __init__(self, topic: object, why: str):
        super().__init__(f"invalid topic {topic!r}: {why}")
        self.topic = topic


class FilterExpressionError(ShmqError):
    """A SQL92 subscription expression that does not compile (SUBSCRIPTION_PARSE_FAILED).

    ``position`` is the 0-based offset in ``expression`` where the problem was found."""
    code = 23

    def __init__(self, reason: str, *, expression: str = "", position: int | None = None):
        where = f" at column {position + 1}" if position is not None else ""
        super().__init__(f"invalid SQL92 filter{where}: {reason} in {expression!r}")
        self.reason, self.expression, self.position = reason, expression, position


# ---- the store -------------------------------------------------------------------------
class StoreError(ShmqError):
    """Something in the store refused or failed the operation."""


class StoreClosed(StoreError):
    def __init__(self, what: str = "store"):
        super().__init__(f"{what} is closed")


class StoreReadOnly(StoreError):
    """A flush failed (EIO/ENOSPC); the store refuses writes from then on (no retry of a failed flush)."""
    code = 14  # SERVICE_NOT_AVAILABLE


class StoreCorrupt(StoreError):
    """A file or the shared control block failed a check it must pass."""


class StoreLocked(StoreError):
    """Another live broker owns this store (flock on store/lock)."""


class StaleSegment(StoreError):
    """The control block this handle maps was fenced by a newer owner; re-attach."""
    retriable = True


class LockTimeout(StoreError):
    """The append lock is held by a live process that did not release it in time. Nothing was stored."""
    code = 2  # SYSTEM_BUSY
    retriable = True


class TableFull(StoreError):
    """The shared topic-queue or consumer-offset table has no free slot."""


class FlushDiskTimeout(StoreError):
    """SYNC_FLUSH: the message is stored but was not flushed within syncFlushTimeout."""
    code = 10

    def __init__(self, message: str = "flush disk timeout", *, result=None, **kw):
        super().__init__(message, **kw)
        self.result = result


#: RocketMQ 4.9.8's remark for a put its store refuses (SERVICE_NOT_AVAILABLE); the bracket
#: says which of the reasons applies here.
NOT_AVAILABLE_REMARK = ("service not available now. It may be caused by one of the following reasons: the broker's "
                        "disk is full, messages are put to the slave, message store has been shut down, etc. ({})")


class DiskFull(StoreError):
    """A file the store needs (the next CommitLog or ConsumeQueue file, an IndexFile) could not
    be allocated: ENOSPC/EDQUOT at posix_fallocate. Nothing was stored; a retry after space
    returns succeeds. Senders get SERVICE_NOT_AVAILABLE with RocketMQ's remark (the path stays in
    the message and the log, not in the answer to a peer)."""
    code = 14
    retriable = True

    @classmethod
    def at(cls, path: str, size: int, why: str) -> "DiskFull":
        return cls(f"cannot allocate {size} bytes for {path}: {why}",
                   remark=NOT_AVAILABLE_REMARK.format(f"the disk is full: {why}"))


class FlushFailed(FlushDiskTimeout):
    """SYNC_FLUSH: the flush that was to cover the message failed (EIO). The record is in the
    log but not known to be on disk, and the store is read-only from then on: answered as
    FLUSH_DISK_TIMEOUT (10), what RocketMQ answers a put whose flush did not complete, never
    SEND_OK."""

    def __init__(self, message: str = "the flush failed with an I/O error; the store is read-only", **kw):
        super().__init__(message, **kw)


class SlaveStore(StoreError):
    """The store belongs to a SLAVE: only replication writes into it (RocketMQ answers a put
    on a slave SERVICE_NOT_AVAILABLE). Nothing was stored."""
    code = 14


class ReplicationError(StoreError):
    """SYNC_MASTER: the message is stored on the master but no slave confirmed it: ``code``
    says why, FLUSH_SLAVE_TIMEOUT (12, not within syncFlushTimeout) or SLAVE_NOT_AVAILABLE
    (11, no slave connected, or it lags more than haSlaveFallbehindMax)."""

    def __init__(self, message: str, *, code: int, result=None):
        super().__init__(message, code=code)
        self.result = result


# ---- remoting ----------------------------------------------------------------------------
class RemotingError(ShmqError):
    """Transport-level failure: connection, timeout, malformed frame."""
    retriable = True


class RemotingTimeout(RemotingError):
    pass


class RemotingConnectError(RemotingError):
    pass


class FrameError(RemotingError):
    """A frame that cannot be decoded (bad length, header, serialize type)."""
    retriable = False


class FrameTooLarge(FrameError):
    """A frame's length word announces more than ``maxFrameSize`` (checked before allocating)."""

    def __init__(self, size: int, limit: int):
        super().__init__(f"frame of {size} bytes exceeds maxFrameSize {limit}")
        self.size, self.limit = size, limit


class HeaderDecodeError(FrameError):
    """The header of a well-delimited frame is malformed (``what`` says where)."""

    def __init__(self, what: str, *, serialize_type: int | None = None):
        super().__init__(f"bad remoting header: {what}")
        self.what, self.serialize_type = what, serialize_type


class RemotingClosed(RemotingError):
    """The connection closed before the answer came (or was already closed)."""


class CommandFieldError(ShmqError):
    """A request's custom header or body lacks a field or holds one of the wrong type.

    RocketMQ answers these SYSTEM_ERROR with the exception text; so do shmq's servers."""

    def __init__(self, field: str, why: str, *, value: object = None):
        super().__init__(f"the custom field <{field}> {why}")
        self.field, self.why, self.value = field, why, value


class BodyDecodeError(ShmqError):
    """A request or response body that does not parse as the structure its code implies."""

    def __init__(self, what: str, why: str):
        super().__init__(f"cannot decode {what}: {why}")
        self.what, self.why = what, why


class BrokerError(ShmqError):
    """A broker or NameServer answered with a non-success response code."""

    def __init__(self, code: int, remark: str | None = None):
        super().__init__(f"code {code}: {remark}" if remark else f"code {code}", code=code, remark=remark)


class TopicNotExist(BrokerError):
    pass


class NoPermission(BrokerError):
    pass


class ServiceNotAvailable(BrokerError):
    retriable = True


class SystemBusy(BrokerError):
    retriable = True


# Response code -> exception class, the one table used to raise from a broker answer.
RESPONSE_CODE_ERRORS: dict[int, type[BrokerError]] = {
    2: SystemBusy,
    14: ServiceNotAvailable,
    16: NoPermission,
    17: TopicNotExist,
}


def error_for_response(code: int, remark: str | None) -> BrokerError:
    return RESPONSE_CODE_ERRORS.get(code, BrokerError)(code, remark)


# C core status code -> exception, the one table used to raise from a C call's answer. Rows:
# (name in shmq/native/layout.h, value, make(what, size, limit)); tests/layout checks every value
# against the compiled header. ENEEDLOG / ENEEDCQ / EMONTH / EBUSY are not errors (the caller maps a
# file, rolls its id month, or calls again through the path that may sleep), so they are not here.
_C_STATUS = (
    ("SHMQ_ETIMEDOUT", -3, lambda what, size, limit: LockTimeout(
        "the append lock is held by a live process that did not release it in time")),
    ("SHMQ_ESTALE", -4, lambda what, size, limit: StaleSegment(
        "the store's control block was fenced by a newer broker; re-attach")),
    ("SHMQ_ETOOBIG", -5, lambda what, size, limit: MessageTooLarge(size, limit)),
    ("SHMQ_EINVAL", -6, lambda what, size, limit: InvalidMessage(
        f"{what}: invalid argument (properties over 32767 bytes, or unknown queue)")),
    ("SHMQ_EREADONLY", -7, lambda what, size, limit: StoreReadOnly(
        "the store is read-only after a failed flush (I/O error); restart the broker once the disk is fixed",
        remark=NOT_AVAILABLE_REMARK.format("the store is read-only after an I/O error on flush"))),
    ("SHMQ_EFULL", -8, lambda what, size, limit: TableFull(f"{what}: the shared table is full")),
    ("SHMQ_EBADBATCH", -9, lambda what, size, limit: InvalidMessage("malformed batch body")),
    ("SHMQ_EIO", -10, lambda what, size, limit: FlushFailed()),
    # RocketMQ's answer to a put on a slave (SERVICE_NOT_AVAILABLE and this remark)
    ("SHMQ_ESLAVE", -12, lambda what, size, limit: SlaveStore(
        "service not available now. It may be caused by one of the following reasons: the broker's disk is full, "
        "messages are put to the slave, message store has been shut down, etc. (the broker role is slave)")),
)
C_STATUS_NAMES: dict[int, str] = {value: name for name, value, _ in _C_STATUS}
_C_STATUS_ERRORS = {value: make for _, value, make in _C_STATUS}


def error_for_status(rc: int, what: str = "append", size: int = 0, limit: int = 0) -> ShmqError:
    """The exception for a C core status ``rc`` (``what`` names the operation; ``size`` and
    ``limit`` go into MessageTooLarge)."""
    make = _C_STATUS_ERRORS.get(rc)
    if make is None:
        return StoreError(f"{what} failed with status {rc}")
    return make(what, size, limit)
