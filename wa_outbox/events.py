"""Events for apps: the envelope every receiver sees and the feed's cursor.

An event is one row of `wa_outbox.events`, written in the same transaction as the fact it reports. Apps get it by
pull (GET /v1/events, wa_outbox.events_after(), `wa-outbox events tail`) or by push (endpoints, signed as the
Standard Webhooks specification says). Both render it with `envelope()`, so a pulled event and a pushed one are the
same bytes: `{"id", "type", "timestamp", "data"}` (https://www.standardwebhooks.com/).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import orjson

from .states import EventType, TimelineEvent

# The shape of `data` for every type: a receiver reads data["schema_version"]; a field may be added within a version,
# never removed or changed in meaning.
SCHEMA_VERSION = 1


def event_id(seq: int) -> str:
    """The event's stable id (the same on every delivery attempt, replay and read of the feed)."""
    return f"evt_{seq}"


def envelope(seq: int, type_: str, occurred_at: datetime, data: dict[str, Any]) -> dict[str, Any]:
    return {"id": event_id(seq), "type": type_, "timestamp": occurred_at.isoformat(), "data": data}


def envelope_bytes(seq: int, type_: str, occurred_at: datetime, data: dict[str, Any]) -> bytes:
    """The exact bytes delivered to endpoints (and signed)."""
    return orjson.dumps(envelope(seq, type_, occurred_at, data))


# Meta's webhook field → the event type a change of it becomes; any other field is EventType.WEBHOOK_OTHER (with the
# field in data). The same table as wa_outbox.event_type_of() in SQL, which the emission trigger uses
# (tests/db/test_events_emission.py compares them). Inbound messages are message.received, or message.echo for
# smb_message_echoes; statuses become message.status once applied to their message.
FIELD_EVENT_TYPES: dict[str, EventType] = {
    "message_template_status_update": EventType.TEMPLATE_STATUS,
    "message_template_quality_update": EventType.TEMPLATE_QUALITY,
    "template_category_update": EventType.TEMPLATE_CATEGORY,
    "message_template_components_update": EventType.TEMPLATE_COMPONENTS,
    "account_update": EventType.ACCOUNT_UPDATE,
    "account_review_update": EventType.ACCOUNT_REVIEW,
    "account_alerts": EventType.ACCOUNT_ALERT,
    "business_capability_update": EventType.BUSINESS_CAPABILITY,
    "phone_number_name_update": EventType.PHONE_NUMBER_NAME,
    "phone_number_quality_update": EventType.PHONE_NUMBER_QUALITY,
    "calls": EventType.CALL,
    "user_preferences": EventType.USER_PREFERENCES,
    "security": EventType.SECURITY,
    "flows": EventType.FLOWS,
}

# The timeline words (notification_events.event) that become a message.status event, and the status it reports:
# the transitions an app acts on (wa_outbox.emit_message_statuses() in SQL: the same list). `reconciled` is a status
# webhook showing Meta accepted an unknown or re-queued send: for the app, it was sent.
STATUS_TRANSITIONS: dict[TimelineEvent, str] = {
    TimelineEvent.SENT: "sent", TimelineEvent.RECONCILED: "sent", TimelineEvent.DELIVERED: "delivered",
    TimelineEvent.READ: "read", TimelineEvent.PLAYED: "played", TimelineEvent.FAILED: "failed",
    TimelineEvent.DEAD: "dead", TimelineEvent.CANCELLED: "cancelled",
}


def event_type_of(field: str) -> EventType:
    return FIELD_EVENT_TYPES.get(field, EventType.WEBHOOK_OTHER)


# --- the feed's cursor ---------------------------------------------------------------------------------------------
# Opaque to clients. It is "<txid>-<seq>" of an event: the feed's order is (txid, seq) (see wa_outbox.events and
# events_after() in sql/schema.sql, which read and write the same form). At most 18 digits each: always a bigint.
_CURSOR = re.compile(r"([0-9]{1,18})-([0-9]{1,18})")
MAX_LIMIT = 1000        # events per read (events_after's max_rows)
MAX_WAIT_SECONDS = 30   # a long poll's longest wait (GET /v1/events?wait=)


class CursorError(ValueError):
    """Not a cursor this feed wrote."""


def encode_cursor(txid: int, seq: int) -> str:
    return f"{txid}-{seq}"


def decode_cursor(cursor: str) -> tuple[int, int]:
    match = _CURSOR.fullmatch(cursor)
    if match is None:
        raise CursorError(f"not a cursor of this feed: {cursor[:80]!r}")
    return int(match.group(1)), int(match.group(2))
