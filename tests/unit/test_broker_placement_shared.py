"""broker/shared/placement.py: the shared connection counts pick the live sibling serving
fewest, and an inbox carries an accepted socket to another holder with its stream intact."""
from __future__ import annotations

import os
import socket

from shmq.broker.shared import placement


def test_fewest_is_a_live_sibling_serving_fewer():
    counts = placement.ConnCounts.create(3)
    try:
        assert counts.fewest(1, 5) is None  # every sibling down (not started, or reaped)
        counts.set(2, 4)
        counts.set(3, 2)
        assert counts.fewest(1, 5) == 3
        assert counts.fewest(1, 2) is None  # a tie keeps the connection where it landed
        counts.set(3, placement.DOWN)
        assert counts.fewest(1, 5) == 2
        assert counts.fewest(2, 0) is None
    finally:
        counts.close()


def test_the_worker_environment_round_trips():
    counts, boxes = placement.create([1, 2])
    try:
        got_counts, got_boxes = placement.parse_env(placement.env_value(counts, boxes))
        assert (got_counts.n, got_boxes.recv, got_boxes.send) == (2, boxes.recv, boxes.send)
        assert set(placement.fds(counts, boxes)) == {counts.fd, *boxes.recv.values(), *boxes.send.values()}
        got_counts._map.close()  # (the fd is counts')
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
