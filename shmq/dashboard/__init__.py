"""``shmq dashboard``: a web view of a cluster (brokers, topics, consumer groups and their lag,
message lookup, offset reset, dead-letter re-send, live charts), served on loopback by default.

It talks to the NameServer and brokers only through shmq's admin client (shmq.client.admin)
on the RocketMQ wire, as RocketMQ Dashboard does, never to store files; so it works against
any shmq or Apache RocketMQ cluster it can reach. The stack is the standard library's HTTP
server and a page of plain HTML, CSS and hand-written JavaScript (static/): nothing to build,
nothing to download, nothing fetched from the network by the browser.
"""
