"""broker/shared/placement.py: the shared loads pick the lighter live sibling (idle before
fewer connections), and an inbox carries an accepted socket to another holder with its stream intact."""
from __future__ import annotations

import os
import socket

from shmq.broker.shared import placement


def test_the_lighter_sibling_is_idle_before_it_has_fewer_connections():
    loads = placement.WorkerLoads.create(3)
    busy = placement.BUSY
    try:
        assert loads.lighter(1, 5, 0) is None  # every sibling down (not started, or reaped)
        loads.set(2, 4, 0)
        loads.set(3, 2, 0)
        assert loads.get(3) == (2, 0)
        assert loads.lighter(1, 5, 0) == 3  # fewer connections, all idle
        assert loads.lighter(1, 2, 0) is None  # a tie keeps the connection where it landed
        loads.set(3, 2, busy)
        assert loads.lighter(1, 5, 0) == 2  # idle wins over busy, whatever the connections
        assert loads.lighter(1, 1, busy) == 2  # this one busy: an idle sibling is lighter
        assert loads.lighter(1, 1, 0) is None  # idle with fewer: keep
        loads.set(2, placement.DOWN, 0)
        assert loads.lighter(1, 5, busy) == 3  # busy too, but fewer connections
        assert loads.lighter(1, 2, busy) is None
    finally:
        loads.close()


def test_the_worker_environment_round_trips():
    counts, boxes = placement.create([1, 2])
    try:
        got_loads, got_boxes = placement.parse_env(placement.env_value(counts, boxes))
        assert (got_loads.n, got_boxes.recv, got_boxes.send) == (2, boxes.recv, boxes.send)
        assert set(placement.fds(counts, boxes)) == {counts.fd, *boxes.recv.values(), *boxes.send.values()}
        got_loads._map.close()  # (the fd is counts')
        assert placement.parse_env(None) is None and placement.parse_env("0") is None
    finally:
        counts.close()
        boxes.close()


def test_a_handed_socket_carries_its_unread_bytes():
    counts, boxes = placement.create([1, 2])
    a, b = socket.socketpair()
    try:
        a.sendall(b"request")
        assert placement.send_fd(boxes.send[2], b.fileno())
        b.close()  # the sender's copy: the connection stays open, the inbox holds it
        (fd,) = placement.take_fds(boxes.recv[2])
        assert not os.get_inheritable(fd)  # close-on-exec, as the worker's own fds
        with socket.socket(fileno=fd) as taken:
            assert taken.recv(16) == b"request"
            taken.sendall(b"answer")
            assert a.recv(16) == b"answer"
        assert placement.take_fds(boxes.recv[2]) == []
    finally:
        a.close()
        counts.close()
        boxes.close()


def test_sockets_queued_for_a_dead_worker_are_closed_for_their_clients():
    counts, boxes = placement.create([1, 2])
    a, b = socket.socketpair()
    try:
        assert placement.send_fd(boxes.send[2], b.fileno())
        b.close()
        for fd in placement.take_fds(boxes.recv[2]):  # what the supervisor does on reaping worker 2
            os.close(fd)
        assert a.recv(16) == b""  # the client sees the close (and reconnects)
    finally:
        a.close()
        counts.close()
        boxes.close()
