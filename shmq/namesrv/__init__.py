"""The NameServer: route table, RocketMQ request handlers, broker liveness scan.

Imports only :mod:`shmq.protocol` and :mod:`shmq.errors` (DESIGN §2).
"""
from shmq.namesrv.config import NamesrvConfig
from shmq.namesrv.routes import RouteTable
from shmq.namesrv.server import NameServer

__all__ = ["NameServer", "NamesrvConfig", "RouteTable"]
