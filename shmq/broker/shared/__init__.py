"""What both broker processes import: ``config.py`` (BrokerConfig, from broker.conf),
``control_channel.py`` (the supervisor<->worker protocol over a unix socket), ``topics.py``
(the topic table: the supervisor owns it, each worker keeps a copy). Nothing here imports
``shmq.broker.supervisor`` or ``shmq.broker.worker``."""
