"""shmq.protocol.loop: the servers run uvloop (a dependency), ``SHMQ_UVLOOP=0`` forces asyncio,
and the client's loop stays the standard selector loop whatever the servers run."""
from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import uvloop

from shmq.client.handoff import ClientLoop
from shmq.protocol import loop as loops


def test_servers_run_uvloop_by_default(monkeypatch):
    monkeypatch.delenv("SHMQ_UVLOOP", raising=False)
    assert loops.loop_name() == "uvloop"
    assert loops.run(_running_loop_type()) is uvloop.Loop


def test_zero_forces_asyncio(monkeypatch):
    monkeypatch.setenv("SHMQ_UVLOOP", "0")
    assert loops.loop_name() == "asyncio"
    t = loops.run(_running_loop_type())
    assert t is not uvloop.Loop and issubclass(t, asyncio.BaseEventLoop)


@pytest.mark.parametrize("flag", ["0", "1"])
def test_client_loop_is_the_selector_loop(monkeypatch, flag):
    monkeypatch.setenv("SHMQ_UVLOOP", flag)
    lp = ClientLoop()
    try:
        assert isinstance(lp, asyncio.SelectorEventLoop)
    finally:
        lp.close()


def test_namesrv_announces_its_loop():
    with subprocess.Popen([sys.executable, "-m", "shmq.cli.namesrv", "--port", "0", "--log-level", "WARNING"],
                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, text=True) as p:
        try:
            assert p.stdout.readline().rstrip().endswith("(uvloop)")
        finally:
            p.terminate()
            p.wait(30)


async def _running_loop_type():
    return type(asyncio.get_running_loop())
