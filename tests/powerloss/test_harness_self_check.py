"""The power-loss harness must fail when durability is broken: a SYNC_FLUSH broker that answers
SEND_OK before its flush (broken_broker.py, the breakage lives only in the test tree) must be
caught losing acknowledged messages. Bounded: up to six crashes of three cuts each, stopping
at the first loss (a crash lands, on the machine this was written on, with a few ms of
acknowledged but unflushed sends; a cut drops each of their pages with probability 1/2)."""
import random

import pytest

from . import harness

pytestmark = pytest.mark.crash


def test_harness_catches_a_broker_that_acks_before_its_flush(processes, tmp_path):
    seed = random.randrange(1 << 30)
    print(f"seed {seed}")
    outcomes = harness.run(processes, tmp_path, "SYNC_FLUSH", crashes=6, cuts=3, seed=seed,
                           broken=True, stop_on_loss=True)
    print(harness.summary(outcomes))
    assert all(o.started for o in outcomes)
    assert any(o.acked_lost for o in outcomes), harness.summary(outcomes)
