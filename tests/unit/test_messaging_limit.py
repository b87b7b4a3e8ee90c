"""The messaging limit's pure decisions (wa_outbox/messaging_limit.py): what a limit given means, what a capability
webhook names, which bodies are templates, and when a campaign finishes at a limit. Who counts and when a unit frees
are driven with the SQL functions too, in tests/db/test_portfolio_limits.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from wa_outbox.messaging_limit import campaign_finish, capability_limit, is_template, parse_limit

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
DAY = timedelta(hours=24)


@pytest.mark.parametrize("given,expected", [
    (250, 250), ("2000", 2000), ("10,000", 10_000), (0, 0), (100000.0, 100_000), ("unlimited", None),
    ("UNLIMITED", None), ("TIER_UNLIMITED", None), (None, None), (" off ", None)])
def test_limits_given(given, expected):
    assert parse_limit(given) == expected


@pytest.mark.parametrize("given", [-1, "-5", "lots", True, 1.5, [], {}, "", 10**12])
def test_bad_limits_are_refused_with_a_sentence(given):
    with pytest.raises(ValueError, match="messaging limit"):
        parse_limit(given)


def test_a_capability_update_names_a_limit_only_in_max_daily_conversations_per_business():
    assert capability_limit({"max_daily_conversations_per_business": 2000}) == (True, 2000)
    assert capability_limit({"max_daily_conversations_per_business": "UNLIMITED"}) == (True, None)
    assert capability_limit({"max_daily_conversation_per_phone": 1000}) == (False, None)  # the legacy per-number one
    assert capability_limit({"max_daily_conversations_per_business": "garbage"}) == (False, None)
    assert capability_limit(["x"]) == (False, None)


def test_templates():
    assert is_template({"type": "template", "template": {}})
    assert is_template({"template": {"name": "x"}})
    assert not is_template({"type": "text", "text": {"body": "x"}})
    assert not is_template("template")


def test_a_campaign_within_what_is_left_finishes_now():
    assert campaign_finish(10, 20, 250, [T0 - H] * 230, T0) == T0
    assert campaign_finish(0, 0, 250, [], T0) == T0
    assert campaign_finish(5000, None, None, [], T0) == T0   # no limit


def test_a_campaign_over_the_limit_waits_for_units_to_free():
    # 250, none used: 250 now, the other 750 in three more days of 250
    assert campaign_finish(1000, 250, 250, [], T0) == T0 + 3 * DAY
    assert campaign_finish(251, 250, 250, [], T0) == T0 + DAY
    # 2 of 3 used (at T0-20h and T0-10h), 1 left: the 4th customer goes when the T0-10h unit frees
    units = [T0 - 10 * H, T0 - 20 * H]
    assert campaign_finish(2, 1, 3, units, T0) == T0 + 4 * H     # the 2nd: when the oldest frees
    assert campaign_finish(3, 1, 3, units, T0) == T0 + 14 * H
    assert campaign_finish(4, 1, 3, units, T0) == T0 + DAY       # the 4th: the unit taken now frees
    assert campaign_finish(5, 1, 3, units, T0) == T0 + 4 * H + DAY


def test_a_limit_of_zero_never_finishes():
    assert campaign_finish(1, 0, 0, [], T0) is None
