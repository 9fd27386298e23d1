"""Checks a message must pass before anything is written (RocketMQ's TopicValidator and
MessageStoreConfig limits). Each failure is an InvalidMessage subclass naming the limit."""
from __future__ import annotations

import re

from shmq.errors import InvalidMessage, InvalidTopic, MessageTooLarge
from shmq.message.names import NOT_SENDABLE_TOPICS

TOPIC_RE = re.compile(r"^[%|a-zA-Z0-9_-]+$")
TOPIC_MAX = 127
PROPERTIES_MAX = 32767

# Topics a client may not send to (TopicValidator.NOT_ALLOWED_SEND_TOPIC_SET).
SYSTEM_TOPICS = NOT_SENDABLE_TOPICS

_valid_topics: set[str] = set()


def check_topic(topic) -> bytes:
    """The topic's bytes, or InvalidTopic. Valid names are cached (the check is on the hot path)."""
    if topic in _valid_topics:
        return topic.encode()
    if not isinstance(topic, str) or not topic:
        raise InvalidTopic(topic, "must be a non-empty string")
    if len(topic) > TOPIC_MAX:
        raise InvalidTopic(topic, f"longer than {TOPIC_MAX} characters")
    if not TOPIC_RE.match(topic):
        raise InvalidTopic(topic, "allowed characters are letters, digits, %, |, _ and -")
    if len(_valid_topics) < 100_000:
        _valid_topics.add(topic)
    return topic.encode()


def check_sendable_topic(topic) -> bytes:
    t = check_topic(topic)
    if topic in SYSTEM_TOPICS:
        raise InvalidTopic(topic, "is a system topic that clients may not send to")
    return t


def check_sizes(body_len: int, props_len: int, max_message_size: int) -> None:
    if body_len > max_message_size:
        raise MessageTooLarge(body_len, max_message_size)
    if props_len > PROPERTIES_MAX:
        raise InvalidMessage(f"properties of {props_len} bytes exceed {PROPERTIES_MAX}")
