"""How far ahead the slots reserved before a claim begin (wa_outbox/worker/_sender.py ahead_lead): after the claim's
expected end, whatever the rate, so a drain's rows reach their threads before their slots instead of re-slotted."""

import pytest

from wa_outbox.worker._sender import AHEAD_LEAD_MIN, SLOT_LEAD, ahead_lead


def test_before_any_claim_the_lead_is_the_claims_own():
    assert ahead_lead(None) == SLOT_LEAD


@pytest.mark.parametrize("claim_seconds", [0.0005, 0.004, 0.012, 0.020, 0.030])
def test_the_first_slot_lies_after_the_claims_expected_end(claim_seconds):
    assert claim_seconds < ahead_lead(claim_seconds) <= SLOT_LEAD


def test_the_lead_grows_with_the_claim_time():
    leads = [ahead_lead(s) for s in (0.0, 0.002, 0.008, 0.016, 0.025)]
    assert leads == sorted(leads) and leads[0] == AHEAD_LEAD_MIN


def test_a_slow_claim_never_delays_the_first_slot_past_slot_lead():
    # a claim slower than SLOT_LEAD (a stalled database) re-slots its rows rather than idling every sender longer
    assert ahead_lead(0.5) == ahead_lead(10.0) == SLOT_LEAD


def test_the_lead_is_not_one_slot_interval_at_high_rates():
    # the bug it fixes: at 10,000 mps one slot interval (0.1 ms) is far less than any claim
    assert ahead_lead(0.010) > 10 * (1 / 10_000)
