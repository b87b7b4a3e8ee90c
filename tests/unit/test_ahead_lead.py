"""How far ahead the slots reserved before a claim begin (wa_outbox/worker/_sender.py ahead_lead): about when the
claim's rows reach their threads, whatever the rate: a drain's rows are sent at their slots, not re-slotted, and
their threads do not sit waiting."""

import pytest

from wa_outbox.worker._sender import AHEAD_LEAD_MARGIN, AHEAD_LEAD_MIN, LATE_SEND_LIMIT, SLOT_LEAD, ahead_lead


def test_before_any_claim_the_lead_is_the_claims_own():
    assert ahead_lead(None) == SLOT_LEAD


@pytest.mark.parametrize("claim_seconds", [0.0005, 0.004, 0.008, 0.012, 0.020, 0.030])
def test_a_slow_claim_still_hands_its_rows_over_within_the_late_limit(claim_seconds):
    # a claim AHEAD_LEAD_MARGIN times slower than its average reaches the first slot no later than LATE_SEND_LIMIT
    assert claim_seconds * AHEAD_LEAD_MARGIN <= ahead_lead(claim_seconds) + LATE_SEND_LIMIT + 1e-12


@pytest.mark.parametrize("claim_seconds", [0.004, 0.012, 0.020, 0.030])
def test_an_average_claims_threads_wait_little_for_their_first_slot(claim_seconds):
    # the wait after an average claim: half of it at most, plus the minimum (a waiting thread serves no one)
    assert ahead_lead(claim_seconds) - claim_seconds <= claim_seconds * (AHEAD_LEAD_MARGIN - 1) + AHEAD_LEAD_MIN


def test_the_lead_grows_with_the_claim_time_between_its_bounds():
    leads = [ahead_lead(s) for s in (0.0, 0.004, 0.008, 0.016, 0.025, 0.5)]
    assert leads == sorted(leads) and leads[0] == AHEAD_LEAD_MIN and leads[-1] == SLOT_LEAD
    assert ahead_lead(0.5) == ahead_lead(10.0) == SLOT_LEAD  # a stalled database idles no sender longer


def test_the_lead_is_not_one_slot_interval_at_high_rates():
    # the bug it fixes: at 10,000 mps one slot interval (0.1 ms) is far less than a 20 ms claim needs
    assert ahead_lead(0.020) > 100 * (1 / 10_000)


def test_a_sender_whose_sends_may_go_later_gets_its_slots_nearer():
    # above Meta's highest throughput the margin lets a send go seconds late (late_send_limit): a thread waiting for
    # a slot its row could have gone in anyway serves no one
    assert ahead_lead(0.030, late_limit=15.0) == AHEAD_LEAD_MIN
    assert ahead_lead(0.030, late_limit=0.030) <= ahead_lead(0.030)
