"""Meta's messaging limit per business portfolio, its pure decisions: who counts, when a unit frees, when a campaign
finishes at a limit, and what a limit given by an operator or a webhook means.

Meta limits how many unique customers a business portfolio reaches with business-initiated messages outside a
customer-service window in a moving 24 hours (https://developers.facebook.com/docs/whatsapp/messaging-limits) and
documents no error for going over it: wa-outbox keeps the count (wa_outbox.portfolios, portfolio_units) and the claim
(claim_notifications.sql) takes a unit per new customer. The SQL functions wa_outbox.counts_against_limit and
wa_outbox.next_unit_frees are the same rules as counts_against_limit and next_unit_frees here
(tests/db/test_portfolio_limits.py drives both with the same cases).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

WINDOW = timedelta(hours=24)  # the moving window of the limit, and the customer-service window
UNLIMITED_WORDS = frozenset({"unlimited", "none", "off"})
MAX_LIMIT = 2_000_000_000  # an integer column; Meta's tiers stop at 100,000 then unlimited


def is_template(message: Any) -> bool:
    """Whether a message body is a template (as the claim reads it: its `type`, else a `template` key)."""
    if not isinstance(message, dict):
        return False
    kind = message.get("type") if "type" in message else ("template" if "template" in message else None)
    return kind == "template"


def counts_against_limit(is_template: bool, last_inbound_at: datetime | None, counted_at: datetime | None,
                         at: datetime) -> bool:
    """A message takes a unit when it is a template, its customer's service window is not open (no message from
    them in the 24 hours before `at`), and the customer has no unit of the portfolio younger than 24 hours
    (`counted_at`: their last one)."""
    return (bool(is_template)
            and (last_inbound_at is None or last_inbound_at < at - WINDOW)
            and (counted_at is None or counted_at <= at - WINDOW))


def next_unit_frees(oldest_counted_at: datetime | None, at: datetime) -> datetime:
    """When a message held by the limit may go: when the oldest unit in the window frees; with none to wait for
    (a limit of 0, or only units being counted now), 24 hours from `at`."""
    return (oldest_counted_at or at) + WINDOW


def parse_limit(value: Any) -> int | None:
    """A limit as given (CLI, /v1, a webhook's max_daily_conversations_per_business): a whole number >= 0, or
    "unlimited" (None: nothing enforced). Raises ValueError with a sentence for anything else."""
    if isinstance(value, bool):
        raise ValueError("the messaging limit must be a whole number >= 0 or 'unlimited'")
    if value is None:
        return None
    if isinstance(value, str):
        word = value.strip().lower()
        if word in UNLIMITED_WORDS or word.removeprefix("tier_") == "unlimited":
            return None
        word = word.replace(",", "").replace("_", "")
        if not word.isdigit():
            raise ValueError(f"the messaging limit must be a whole number >= 0 or 'unlimited', not {value!r}")
        value = int(word)
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"the messaging limit must be a whole number >= 0 or 'unlimited', not {value!r}")
    if value > MAX_LIMIT:
        raise ValueError(f"the messaging limit must be at most {MAX_LIMIT:,} (or 'unlimited')")
    return value


def capability_limit(value: Any) -> tuple[bool, int | None]:
    """A business_capability_update's value → (it names the portfolio's limit, the limit). Meta names it
    max_daily_conversations_per_business (https://developers.facebook.com/docs/whatsapp/messaging-limits); a value
    that is not a limit (missing, garbage) names none, so a webhook can never clear a limit by accident."""
    if not isinstance(value, dict) or "max_daily_conversations_per_business" not in value:
        return False, None
    try:
        return True, parse_limit(value["max_daily_conversations_per_business"])
    except ValueError:
        return False, None


def campaign_finish(counting: int, remaining: int | None, limit: int | None, units: Sequence[datetime],
                    at: datetime) -> datetime | None:
    """When the last of `counting` customers (each taking a unit) can be sent, at this limit: the first `remaining`
    at once, each next one when a unit frees (`units`: the counted_at of the portfolio's units in the window, any
    order), a unit taken now freeing again 24 hours later. None: never (a limit of 0). No limit: at once."""
    if limit is None or counting <= 0:
        return at
    if limit <= 0:
        return None
    room = max(0, remaining if remaining is not None else limit)
    if counting <= room:
        return at
    # The window after the first `room` go: the units counted before, then `room` counted now, oldest first.
    window = sorted(units)[-max(0, limit - room):] if limit > room else []
    window = (list(window) + [at] * room)[-limit:]
    while len(window) < limit:  # fewer units than the limit known (a limit lowered): the free ones go now
        window.insert(0, at - WINDOW)
    k = counting - room - 1  # the last customer's place among those that wait
    return window[k % limit] + WINDOW * (k // limit + 1)
