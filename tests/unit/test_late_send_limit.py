"""How late a send may go after its slot (worker/_sender.py late_send_limit), from its schedule's margin (schema.sql
slot_margin; tests/db/test_pacing.py drives the SQL side with the same rates)."""

from __future__ import annotations

import pytest

from wa_outbox.worker._sender import LATE_SEND_LIMIT, SLOT_WAKE_EARLY, late_send_limit

# (mps, burst) -> the margin slot_margin gives: 15.2 ms up to Meta's highest throughput, growing with the rate above it
MARGINS = [(20, None, 1 / 0.985 - 1), (80, None, 1 / 0.985 - 1), (1000, None, 1 / 0.985 - 1),
           (2000, None, 2 * (1 / 0.985 - 1)), (1e6, None, 1000 * (1 / 0.985 - 1)), (80, 10, 0.0)]


def test_at_every_rate_meta_sets_the_limit_is_the_one_the_window_was_designed_for():
    assert late_send_limit(1 / 0.985 - 1) == pytest.approx(LATE_SEND_LIMIT, abs=1e-4)
    assert SLOT_WAKE_EARLY + LATE_SEND_LIMIT < 1 / 0.985 - 1  # early and late together fit in the margin


@pytest.mark.parametrize(("mps", "burst", "margin"), MARGINS)
def test_the_limit_never_exceeds_the_margin_and_never_falls_below_the_floor(mps, burst, margin):
    limit = late_send_limit(margin)
    assert limit >= LATE_SEND_LIMIT
    if margin >= LATE_SEND_LIMIT + SLOT_WAKE_EARLY:
        assert limit + SLOT_WAKE_EARLY < margin  # a send early or late stays inside the schedule's margin


def test_a_rate_no_machine_reaches_lets_a_send_go_seconds_late_and_no_margin_means_the_floor():
    assert late_send_limit(1000 * (1 / 0.985 - 1)) > 15
    assert late_send_limit(None) == late_send_limit(0.0) == LATE_SEND_LIMIT
