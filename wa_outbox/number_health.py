"""Number health: what Meta's `phone_number_quality_update` and `account_update` webhooks say about a sender number
(its quality, messaging limit tier, throughput level, flag, restrictions, ban), read into one update per change.

Pure functions, never raising: a field of the wrong shape is left out (None), never a failed batch. The inbound worker
(worker/_inbound.py) applies the batch's updates in one statement (record_number_health.sql), which routes each to its
senders: a quality update by the business account (entry[].id) and the display number, an account update to every
number of the account.

The shapes (Meta's references, and the webhook corpus in the repository's tests):
- phone_number_quality_update: `{"display_phone_number", "event", "current_limit", "old_limit"?,
  "max_daily_conversations_per_business"?}`, events DOWNGRADE, FLAGGED, ONBOARDING, THROUGHPUT_UPGRADE, UNFLAGGED,
  UPGRADE; some deliveries also carry `quality_rating` or `throughput: {"level"}` (as the phone number's Graph API
  fields do), which are taken when present.
  https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/phone_number_quality_update
- account_update: `{"event": "ACCOUNT_RESTRICTION", "restriction_info": [{"restriction_type", "expiration"}]}`,
  `{"event": "ACCOUNT_VIOLATION", "violation_info": {"violation_type"}}`, `{"event": "DISABLED_UPDATE", "ban_info":
  {"waba_ban_state", "waba_ban_date"}}`, and others (recorded as the last event only).
  https://developers.facebook.com/documentation/business-messaging/whatsapp/webhooks/reference/account_update
- Throughput: STANDARD is 80 messages per second, HIGH 1,000 (a THROUGHPUT_UPGRADE raises a number to it).
  https://developers.facebook.com/documentation/business-messaging/whatsapp/throughput
"""

from __future__ import annotations

import math
import re
from typing import Any

QUALITY_FIELD = "phone_number_quality_update"
ACCOUNT_FIELD = "account_update"
FIELDS = (QUALITY_FIELD, ACCOUNT_FIELD)

QUALITY_RATINGS = ("GREEN", "YELLOW", "RED", "UNKNOWN")
# Meta's other words for the same ratings (the phone number's quality_score, the WhatsApp Manager's labels).
_RATING_WORDS = {"GREEN": "GREEN", "HIGH": "GREEN", "YELLOW": "YELLOW", "MEDIUM": "YELLOW", "RED": "RED",
                 "LOW": "RED", "UNKNOWN": "UNKNOWN", "NA": "UNKNOWN"}
# account_update DISABLED_UPDATE's ban states that mean a banned number (Meta disabled its business account, or is
# about to): the statements that say `banned` (number_health_metrics.sql, ops_senders.sql) take them from here.
BANNED_STATES = ("DISABLE", "SCHEDULE_FOR_DISABLE")
# wa_outbox_sender_quality: higher is better, so "quality dropped" is a fall (deploy/prometheus/alerts.yml).
QUALITY_VALUES = {"GREEN": 3.0, "YELLOW": 2.0, "RED": 1.0, "UNKNOWN": 0.0}

# Messaging limit tiers and the number of customers in 24 hours each names (None: no number).
TIER_LIMITS: dict[str, int | None] = {"TIER_50": 50, "TIER_250": 250, "TIER_1K": 1000, "TIER_2K": 2000,
                                      "TIER_10K": 10000, "TIER_100K": 100000, "TIER_UNLIMITED": None,
                                      "TIER_NOT_SET": None}
THROUGHPUT_MPS: dict[str, float | None] = {"STANDARD": 80.0, "HIGH": 1000.0, "NOT_APPLICABLE": None}

_WORD = re.compile(r"[A-Z][A-Z0-9_]{0,63}")
_DIGITS = re.compile(r"[0-9]{1,32}")
EARLIEST, LATEST = 946_684_800, 4_102_444_800  # 2000-01-01 .. 2100-01-01: outside, a timestamp is garbage


def word(value: Any) -> str | None:
    """An upper-case word as Meta writes its enums, or None."""
    if isinstance(value, str) and _WORD.fullmatch(value.strip().upper()):
        return value.strip().upper()
    return None


def timestamp(value: Any) -> int | None:
    """Unix seconds (an int or a string of digits) within 2000–2100, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 12:
        value = int(value.strip())
    if isinstance(value, float) and math.isfinite(value):
        value = int(value)
    return value if isinstance(value, int) and EARLIEST <= value <= LATEST else None


def digits(value: Any) -> str | None:
    """A phone number as digits only ("+1 555-078-3881" -> "15550783881"), or None."""
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        return None
    found = re.sub(r"[^0-9]", "", str(value))
    return found if _DIGITS.fullmatch(found) else None


def quality_rating(value: Any) -> str | None:
    return _RATING_WORDS.get(word(value) or "")


def limit_of(tier: str | None) -> int | None:
    """The number a tier names (TIER_1K -> 1000); a plain number is taken as is; None otherwise."""
    if tier is None:
        return None
    if tier.isdigit():
        return int(tier)
    return TIER_LIMITS.get(tier)


def quality_update(value: dict[str, Any]) -> dict[str, Any]:
    """The columns a phone_number_quality_update sets (None: left as they are)."""
    event = word(value.get("event"))
    tier = word(value.get("current_limit"))
    if tier is None and isinstance(value.get("current_limit"), (str, int)) and digits(value.get("current_limit")):
        tier = digits(value.get("current_limit"))
    throughput = value.get("throughput")
    level = word(throughput.get("level")) if isinstance(throughput, dict) else word(value.get("throughput_level"))
    if level is None and event == "THROUGHPUT_UPGRADE":
        level = "HIGH"
    rating = quality_rating(value.get("quality_rating", value.get("quality_score")))
    if rating is None:  # the event alone: FLAGGED is a low rating; UNFLAGGED is medium or better (the lower taken)
        rating = {"FLAGGED": "RED", "UNFLAGGED": "YELLOW"}.get(event or "")
    flagged = {"FLAGGED": True, "UNFLAGGED": False}.get(event or "")
    if flagged is None and rating is not None:
        flagged = rating == "RED"
    return {"quality_event": event, "quality_rating": rating, "flagged": flagged,
            # the tier field carries TIER_UNLIMITED on a throughput upgrade: that is the level, not a messaging limit
            "messaging_limit_tier": None if event == "THROUGHPUT_UPGRADE" else tier,
            "messaging_limit": None if event == "THROUGHPUT_UPGRADE" else limit_of(tier),
            "throughput_level": level, "throughput_mps": THROUGHPUT_MPS.get(level or "")}


def account_update(value: dict[str, Any]) -> dict[str, Any]:
    """The columns an account_update sets (None: left as they are)."""
    event = word(value.get("event"))
    found: dict[str, Any] = {"account_event": event}
    if event == "ACCOUNT_RESTRICTION":
        info = value.get("restriction_info")
        items = [i for i in info if isinstance(i, dict)] if isinstance(info, list) else []
        restrictions = [{"restriction_type": word(i.get("restriction_type")),
                         "expiration": timestamp(i.get("expiration"))} for i in items]
        ends = [i["expiration"] for i in restrictions if isinstance(i["expiration"], int)]
        found["restrictions"] = restrictions
        # every restriction with an end: the latest; one without: none known (NULL)
        found["restricted_until"] = max(ends) if ends and len(ends) == len(restrictions) else None
    if event == "ACCOUNT_VIOLATION":
        info = value.get("violation_info")
        found["violation_type"] = word(info.get("violation_type")) if isinstance(info, dict) else None
    if event == "DISABLED_UPDATE":
        info = value.get("ban_info")
        found["ban_state"] = word(info.get("waba_ban_state")) if isinstance(info, dict) else None
    return found


def health_update(field: str | None, value: Any, event_id: int) -> dict[str, Any] | None:
    """One entry for record_number_health.sql from a stored change (its webhook_events id: the statement reads the
    business account and the time received from there), or None when it is not one of FIELDS."""
    if field not in FIELDS or not isinstance(value, dict):
        return None
    entry: dict[str, Any] = {"event_id": event_id, "field": field}
    if field == QUALITY_FIELD:
        entry["display_phone_number"] = digits(value.get("display_phone_number"))
        entry.update(quality_update(value))
    else:
        entry.update(account_update(value))
    return entry
