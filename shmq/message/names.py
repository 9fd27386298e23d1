"""Names every side agrees on: message property names (RocketMQ's MessageConst), system
topics and prefixes (TopicValidator, MixAll), permission bits (PermName). Spelled here once;
everyone else imports them.
"""
from __future__ import annotations

# ---- property names (MessageConst.PROPERTY_*) -----------------------------------------------
TAGS = "TAGS"
KEYS = "KEYS"
UNIQ_KEY = "UNIQ_KEY"                 # PROPERTY_UNIQ_CLIENT_MESSAGE_ID_KEYIDX
WAIT = "WAIT"                       # WAIT_STORE_MSG_OK: the producer waits for the flush
DELAY = "DELAY"                     # the delay level
CLUSTER = "CLUSTER"                 # the storing broker's cluster
REAL_TOPIC = "REAL_TOPIC"           # where a delayed / half message is headed
REAL_QID = "REAL_QID"
TRAN_MSG = "TRAN_MSG"               # "true": a transaction's half message
PGROUP = "PGROUP"                   # the producer group of a half message
RETRY_TOPIC = "RETRY_TOPIC"         # the original topic of a retried message
ORIGIN_MESSAGE_ID = "ORIGIN_MESSAGE_ID"
RECONSUME_TIME = "RECONSUME_TIME"
MAX_RECONSUME_TIMES = "MAX_RECONSUME_TIMES"
CONSUME_START_TIME = "CONSUME_START_TIME"
MAX_OFFSET = "MAX_OFFSET"           # set on pulled messages by the client
MIN_OFFSET = "MIN_OFFSET"
TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
TRAN_PREPARED_QUEUE_OFFSET = "TRAN_PREPARED_QUEUE_OFFSET"
CHECK_IMMUNITY_TIME_IN_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
# timer messages (RocketMQ 5.x; the put pipeline sends them to the timer wheel: shmq.store.timer_rules)
TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
TIMER_DELAY_SEC = "TIMER_DELAY_SEC"
TIMER_DELAY_MS = "TIMER_DELAY_MS"
TIMER_OUT_MS = "TIMER_OUT_MS"
TIMER_ENQUEUE_MS = "TIMER_ENQUEUE_MS"
TIMER_DEQUEUE_MS = "TIMER_DEQUEUE_MS"
TIMER_ROLL_TIMES = "TIMER_ROLL_TIMES"
TIMER_DEL_UNIQKEY = "TIMER_DEL_UNIQKEY"

# ---- system topics and prefixes (TopicValidator, MixAll) -------------------------------------
RETRY_PREFIX = "%RETRY%"
DLQ_PREFIX = "%DLQ%"
TBW102 = "TBW102"                                   # AUTO_CREATE_TOPIC_KEY_TOPIC
SCHEDULE_TOPIC = "SCHEDULE_TOPIC_XXXX"
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
TRANS_CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
SELF_TEST_TOPIC = "SELF_TEST_TOPIC"
OFFSET_MOVED_EVENT = "OFFSET_MOVED_EVENT"
TIMER_TOPIC = "rmq_sys_wheel_timer"
#: the consumer group whose offsets record the transaction check's progress
TRANS_CHECK_GROUP = "CID_RMQ_SYS_TRANS"
#: topics a client may not send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET)
NOT_SENDABLE_TOPICS = frozenset({SCHEDULE_TOPIC, HALF_TOPIC, OP_HALF_TOPIC, TRANS_CHECK_MAX_TIME_TOPIC,
                                 SELF_TEST_TOPIC, OFFSET_MOVED_EVENT})


def retry_topic(group: str) -> str:
    return RETRY_PREFIX + group


def dlq_topic(group: str) -> str:
    return DLQ_PREFIX + group


# ---- permissions (PermName) ------------------------------------------------------------------
PERM_INHERIT = 1
PERM_WRITE = 2
PERM_READ = 4
PERM_PRIORITY = 8
PERM_RW = PERM_READ | PERM_WRITE

#: the properties the broker or client set (not a user's), hidden when showing user properties
SYSTEM_PROPERTIES = frozenset({TAGS, KEYS, UNIQ_KEY, RETRY_TOPIC, CLUSTER, REAL_TOPIC, REAL_QID, DELAY, WAIT,
                               MIN_OFFSET, MAX_OFFSET, ORIGIN_MESSAGE_ID, RECONSUME_TIME, MAX_RECONSUME_TIMES})
