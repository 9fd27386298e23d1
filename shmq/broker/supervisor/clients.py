"""The client registry: producer and consumer channels per group (``ProducerManager`` and
``ConsumerManager`` of RocketMQ), one per broker, kept by the supervisor.

A *channel* is one client connection held by some worker, named ``"<worker>:<pid>.<seq>"``
by that worker; the supervisor knows which worker holds it from the prefix, so a notification
for a group goes to each member on its own connection whatever worker holds it.

Rules (RocketMQ 4.9.8): a heartbeat records or refreshes the channel of each group it
names; a consumer group *changes* when a channel joins or leaves it or its subscriptions
change, and then every member is told (NOTIFY_CONSUMER_IDS_CHANGED). A channel silent for
``channelExpiredTimeout`` is dropped by the scan; one whose connection closes (or whose
worker died) is dropped at once. A group with no channel left is removed.

Pure data: no I/O, the caller passes ``now`` (monotonic seconds) and acts on the returns.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from shmq.protocol.bodies import ConsumerData, SubscriptionData


@dataclass
class ChannelInfo:
    chan: str
    client_id: str
    language: str
    version: int
    addr: str
    last_update: float


@dataclass
class ConsumerGroupInfo:
    group: str
    channels: dict[str, ChannelInfo] = field(default_factory=dict)
    subscriptions: dict[str, SubscriptionData] = field(default_factory=dict)
    consume_type: str = "CONSUME_PASSIVELY"
    message_model: str = "CLUSTERING"
    consume_from_where: str = "CONSUME_FROM_LAST_OFFSET"

    def client_ids(self) -> list[str]:
        return [c.client_id for c in self.channels.values()]


def worker_of(chan: str) -> int:
    return int(chan.split(":", 1)[0])


def _sub_key(s: SubscriptionData) -> tuple:
    return (s.topic, s.subString, s.expressionType, s.classFilterMode)


class ClientRegistry:
    def __init__(self) -> None:
        self.consumers: dict[str, ConsumerGroupInfo] = {}
        self.producers: dict[str, dict[str, ChannelInfo]] = {}

    # ---- registration ------------------------------------------------------------------------
    def register_consumer(self, data: ConsumerData, info: ChannelInfo) -> bool:
        """Record a consumer heartbeat; True when the group changed (members or subscriptions)."""
        g = self.consumers.get(data.groupName)
        if g is None:
            g = self.consumers[data.groupName] = ConsumerGroupInfo(data.groupName)
        g.consume_type = str(data.consumeType)
        g.message_model = str(data.messageModel)
        g.consume_from_where = str(data.consumeFromWhere)
        old = g.channels.get(info.chan)
        new_channel = old is None or old.client_id != info.client_id
        g.channels[info.chan] = info
        subs = {s.topic: s for s in data.subscriptionDataSet}
        changed_subs = False
        # RocketMQ's ConsumerGroupInfo.updateSubscription: the group keeps, per topic, the
        # subscription of the highest subVersion any member sent. Members re-version their
        # subscription at each rebalance and pull with that version; taking whichever
        # heartbeat came last would let a member's older version overwrite another's newer
        # one, and that member's pulls would be answered SUBSCRIPTION_NOT_LATEST until its
        # next heartbeat.
        for t, sub in subs.items():
            old_sub = g.subscriptions.get(t)
            if old_sub is None or sub.subVersion > old_sub.subVersion:
                changed_subs |= old_sub is None or _sub_key(old_sub) != _sub_key(sub)
                g.subscriptions[t] = sub
        for t in [t for t in g.subscriptions if t not in subs]:
            del g.subscriptions[t]
            changed_subs = True
        return new_channel or changed_subs

    def register_producer(self, group: str, info: ChannelInfo) -> None:
        self.producers.setdefault(group, {})[info.chan] = info

    def unregister_consumer(self, group: str, chan: str) -> bool:
        g = self.consumers.get(group)
        if g is None or g.channels.pop(chan, None) is None:
            return False
        if not g.channels:
            del self.consumers[group]
        return True

    def unregister_producer(self, group: str, chan: str) -> None:
        chans = self.producers.get(group)
        if chans is not None:
            chans.pop(chan, None)
            if not chans:
                del self.producers[group]

    # ---- channels going away --------------------------------------------------------------
    def drop_channels(self, pred) -> list[str]:
        """Remove every channel for which ``pred(ChannelInfo)`` holds; returns the consumer
        groups that changed (and still have members to tell)."""
        changed: list[str] = []
        for name in list(self.consumers):
            g = self.consumers[name]
            gone = [c for c, info in g.channels.items() if pred(info)]
            for c in gone:
                del g.channels[c]
            if gone:
                if g.channels:
                    changed.append(name)
                else:
                    del self.consumers[name]
        for name in list(self.producers):
            chans = self.producers[name]
            for c in [c for c, info in chans.items() if pred(info)]:
                del chans[c]
            if not chans:
                del self.producers[name]
        return changed

    def channel_closed(self, chan: str) -> list[str]:
        return self.drop_channels(lambda i: i.chan == chan)

    def worker_gone(self, worker_id: int) -> list[str]:
        return self.drop_channels(lambda i: worker_of(i.chan) == worker_id)

    def expired(self, now: float, expiry_s: float) -> set[str]:
        """Channels silent longer than ``expiry_s`` (the caller closes and drops them)."""
        out: set[str] = set()
        for g in self.consumers.values():
            out.update(c for c, i in g.channels.items() if now - i.last_update > expiry_s)
        for chans in self.producers.values():
            out.update(c for c, i in chans.items() if now - i.last_update > expiry_s)
        return out

    # ---- queries ---------------------------------------------------------------------------------
    def consumer_ids(self, group: str) -> list[str]:
        g = self.consumers.get(group)
        return g.client_ids() if g else []

    def channels_of(self, group: str) -> list[str]:
        g = self.consumers.get(group)
        return list(g.channels) if g else []

    def subscription(self, group: str, topic: str) -> SubscriptionData | None:
        g = self.consumers.get(group)
        return g.subscriptions.get(topic) if g else None

    def producer_channels(self, group: str) -> list[str]:
        return list(self.producers.get(group, {}))
