"""bench/worker_placement.py reads each socket's segments from ``ss -ti``: the row's sending
connection is picked by them, so a misread would name the wrong worker."""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "bench"))
import worker_placement  # noqa: E402

SS = ("0      0      127.0.0.1:10911 127.0.0.1:48698\n"
      "\t bbr wscale:10,10 rto:204 bytes_sent:1107333 segs_out:1280 segs_in:1405 data_segs_out:1078 "
      "data_segs_in:1348 bbr:(bw:33177588128bps) delivered:1078\n"
      "0      1472   [::ffff:127.0.0.1]:10909 [::ffff:127.0.0.1]:48710\n"
      "\t bbr wscale:10,10 rto:204 segs_out:1806 segs_in:1678 data_segs_out:1760 data_segs_in:7\n"
      "0      0      127.0.0.1:36041 127.0.0.1:48700\n"
      "\t bbr wscale:10,10 rto:204 segs_out:3 segs_in:3\n")


def test_segments_in_by_port_pair():
    assert worker_placement.parse_ss(SS) == {(10911, 48698): 1348, (10909, 48710): 7}
