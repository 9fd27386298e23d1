"""The broker: a supervisor process (store owner, control-plane tables, NameServer
registration, housekeeping) and N worker processes serving RocketMQ remoting over TCP.
See supervisor.py and worker.py; the supervisor<->worker channel is control_channel.py."""
