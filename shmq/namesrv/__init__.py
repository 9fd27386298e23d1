"""The NameServer: route table, RocketMQ request handlers, broker liveness scan.

Imports only :mod:`shmq.protocol`, :mod:`shmq.message` and :mod:`shmq.errors` (tests/layout/test_layers.py).
"""
from shmq.namesrv.config import NamesrvConfig
from shmq.namesrv.routes import RouteTable
from shmq.namesrv.server import NameServer

__all__ = ["NameServer", "NamesrvConfig", "RouteTable"]
