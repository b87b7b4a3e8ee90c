"""What a phone_number_quality_update or account_update says of a number (wa_outbox/number_health.py): Meta's shapes,
read field by field, garbage left out, never raising. No database."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from wa_outbox import number_health as nh

CORPUS = json.loads((Path(__file__).resolve().parents[1] / "data" / "pywa" / "account_update.json").read_text())


def test_a_flag_is_a_low_rating_and_its_tier_is_a_number():
    got = nh.quality_update({"display_phone_number": "15550783881", "event": "FLAGGED", "current_limit": "TIER_10K"})
    assert got == {"quality_event": "FLAGGED", "quality_rating": "RED", "flagged": True,
                   "messaging_limit_tier": "TIER_10K", "messaging_limit": 10000, "throughput_level": None,
                   "throughput_mps": None}


def test_an_unflag_is_medium_or_better_unless_a_rating_is_given():
    assert nh.quality_update({"event": "UNFLAGGED"})["quality_rating"] == "YELLOW"
    given = nh.quality_update({"event": "UNFLAGGED", "quality_rating": "GREEN"})
    assert (given["quality_rating"], given["flagged"]) == ("GREEN", False)


def test_an_upgrade_says_nothing_of_the_flag():
    got = nh.quality_update({"event": "UPGRADE", "current_limit": "TIER_100K", "old_limit": "TIER_10K"})
    assert (got["flagged"], got["quality_rating"], got["messaging_limit"]) == (None, None, 100000)


def test_a_throughput_upgrade_is_the_high_level_not_a_messaging_limit():
    got = nh.quality_update({"event": "THROUGHPUT_UPGRADE", "current_limit": "TIER_UNLIMITED"})
    assert (got["throughput_level"], got["throughput_mps"], got["messaging_limit_tier"]) == ("HIGH", 1000.0, None)
    assert nh.quality_update({"event": "UPGRADE", "throughput": {"level": "STANDARD"}})["throughput_mps"] == 80.0


@pytest.mark.parametrize("value", [{}, {"event": 5, "current_limit": ["x"]}, {"event": "lower case?!"},
                                   {"quality_rating": {"a": 1}, "throughput": "HIGH"}])
def test_garbage_is_left_out(value):
    got = nh.quality_update(value)
    assert got["quality_rating"] is None and got["messaging_limit"] is None and got["throughput_mps"] is None


def test_a_restriction_from_the_corpus_ends_with_its_latest_expiration():
    value = CORPUS["account_restriction"]["entry"][0]["changes"][0]["value"]
    got = nh.account_update(value)
    assert got["account_event"] == "ACCOUNT_RESTRICTION" and len(got["restrictions"]) == 2
    assert got["restricted_until"] == 1641330498
    partly = nh.account_update({"event": "ACCOUNT_RESTRICTION", "restriction_info": [
        {"restriction_type": "RESTRICTED_BIZ_INITIATED_MESSAGING"}, {"expiration": 1641330498}]})
    assert partly["restricted_until"] is None  # one restriction has no end given: none known


def test_a_ban_and_a_violation_from_the_corpus():
    ban = nh.account_update(CORPUS["account_disabled"]["entry"][0]["changes"][0]["value"])
    assert (ban["account_event"], ban["ban_state"]) == ("DISABLED_UPDATE", "REINSTATE")
    violation = nh.account_update(CORPUS["account_violation"]["entry"][0]["changes"][0]["value"])
    assert violation["violation_type"] == "ADULT"


def test_only_the_two_fields_make_an_update_and_display_numbers_are_digits():
    assert nh.health_update("messages", {"event": "FLAGGED"}, 1) is None
    assert nh.health_update("account_update", "not an object", 1) is None
    entry = nh.health_update("phone_number_quality_update", {"display_phone_number": "+1 555-078-3881",
                                                             "event": "FLAGGED"}, 7)
    assert entry is not None and (entry["event_id"], entry["display_phone_number"]) == (7, "15550783881")


def test_the_quality_values_fall_as_quality_drops():
    assert nh.QUALITY_VALUES["GREEN"] > nh.QUALITY_VALUES["YELLOW"] > nh.QUALITY_VALUES["RED"] > \
        nh.QUALITY_VALUES["UNKNOWN"]
