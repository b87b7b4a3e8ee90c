"""Events for apps: the envelope every receiver sees and the feed's cursor.

An event is one row of `wa_outbox.events`, written in the same transaction as the fact it reports. Apps get it by
pull (GET /v1/events, wa_outbox.events_after(), `wa-outbox events tail`) or by push (endpoints, signed as the
Standard Webhooks specification says). Both render it with `envelope()`, so a pulled event and a pushed one are the
same bytes: `{"id", "type", "timestamp", "data"}` (https://www.standardwebhooks.com/).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
import psycopg
import sqlalchemy as sa

from . import queries
from .states import EventType, TimelineEvent

if TYPE_CHECKING:
    from .event_notices import EventNotices

# The shape of `data` for every type: a receiver reads data["schema_version"]; a field may be added within a version,
# never removed or changed in meaning.
SCHEMA_VERSION = 1


def event_id(seq: int) -> str:
    """The event's stable id (the same on every delivery attempt, replay and read of the feed)."""
    return f"evt_{seq}"


def envelope(seq: int, type_: str, occurred_at: datetime, data: dict[str, Any]) -> dict[str, Any]:
    # In UTC whatever the reading connection's TimeZone: a pulled event and a pushed one are the same bytes.
    return {"id": event_id(seq), "type": type_, "timestamp": occurred_at.astimezone(UTC).isoformat(), "data": data}


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


def summary(envelope: dict[str, Any]) -> str:
    """What an event says, in a few words (`events tail`, `events listen`): a status with its outbox id, a customer's
    message with its text, else the webhook field."""
    data = envelope["data"]
    if envelope["type"] == "message.status":
        text = f"outbox {data.get('outbox_id')} {data.get('status')} (to +{data.get('recipient')})"
        return text + (f": {data['error'].get('message')}" if isinstance(data.get("error"), dict)
                       and data["error"].get("message") else "")
    if envelope["type"] in ("message.received", "message.echo"):
        message = data.get("message") if isinstance(data.get("message"), dict) else {}
        body = message.get("text", {}).get("body") if isinstance(message.get("text"), dict) else None
        return f"{message.get('type')} from +{message.get('from')}" + (f": {body[:80]!r}" if body else "")
    return f"field {data.get('field')}"


def event_type_of(field: str) -> EventType:
    return FIELD_EVENT_TYPES.get(field, EventType.WEBHOOK_OTHER)


# --- the feed's cursor ---------------------------------------------------------------------------------------------
# Opaque to clients. It is "<txid>-<seq>" of an event: the feed's order is (txid, seq) (see wa_outbox.events and
# events_after() in sql/schema.sql, which read and write the same form). At most 18 digits each: always a bigint.
_CURSOR = re.compile(r"([0-9]{1,18})-([0-9]{1,18})")
MAX_LIMIT = 1000        # events per read (events_after's max_rows)
MAX_WAIT_SECONDS = 30   # a long poll's longest wait (GET /v1/events?wait=)


class FeedError(ValueError):
    """A request the feed refuses (HTTP 400, a CLI error)."""


class CursorError(FeedError):
    """Not a cursor this feed wrote."""


def encode_cursor(txid: int, seq: int) -> str:
    return f"{txid}-{seq}"


def decode_cursor(cursor: str) -> tuple[int, int]:
    match = _CURSOR.fullmatch(cursor)
    if match is None:
        raise CursorError(f"not a cursor of this feed: {cursor[:80]!r}")
    return int(match.group(1)), int(match.group(2))


# --- the feed: GET /v1/events, `wa-outbox events tail` -------------------------------------------------------------
PRUNED_SQLSTATE = "WA410"   # events_after(): the cursor is older than what retention kept
TICK_SECONDS = 1.0          # a long poll reads again at least this often (an older transaction may have ended)


class CursorPruned(Exception):
    """The events after this cursor were deleted by retention (HTTP 410, a CLI error)."""


@dataclass(frozen=True, slots=True)
class FeedPage:
    data: list[dict[str, Any]]   # envelopes, in feed order
    cursors: list[str]           # each one's cursor
    next_cursor: str | None      # the last event's cursor, or the request's when none came
    has_more: bool               # more events are readable now


def parse_types(raw: str | None) -> list[str] | None:
    """`a,b` → the event types (each one of EventType's words), None for every type."""
    if raw is None or not raw.strip():
        return None
    types = [t.strip() for t in raw.split(",") if t.strip()]
    unknown = sorted(set(types) - {str(t) for t in EventType})
    if unknown:
        raise FeedError(f"unknown event type(s): {', '.join(w[:64] for w in unknown[:5])}; known: "
                        f"{', '.join(str(t) for t in EventType)}")
    return types


def read_feed(engine: sa.Engine, *, after: str | None = None, limit: int = 100, types: list[str] | None = None,
              wait: float = 0.0, notices: EventNotices | None = None) -> FeedPage:
    """One page of the feed after `after`. With `wait` (seconds, at most MAX_WAIT_SECONDS) and nothing to read yet,
    wait for events (woken by `notices`, reading again at least every TICK_SECONDS), then answer what came, if
    anything. Raises FeedError for bad arguments and CursorPruned for a cursor older than what is kept."""
    if after is not None:
        decode_cursor(after)  # CursorError (a FeedError) before any query
    if not 1 <= limit <= MAX_LIMIT:
        raise FeedError(f"limit must be between 1 and {MAX_LIMIT}")
    if not 0 <= wait <= MAX_WAIT_SECONDS:
        raise FeedError(f"wait must be between 0 and {MAX_WAIT_SECONDS} seconds")
    deadline = time.monotonic() + wait
    while True:
        seen = notices.generation() if wait and notices is not None else 0
        rows = _page(engine, after, limit + 1, types)
        left = deadline - time.monotonic()
        if rows or left <= 0:
            break
        if notices is not None:
            notices.wait(seen, min(TICK_SECONDS, left))
        else:
            time.sleep(min(TICK_SECONDS, left))
    shown = rows[:limit]
    return FeedPage(data=[envelope(r.seq, r.type, r.timestamp, r.data) for r in shown],
                    cursors=[r.cursor for r in shown], next_cursor=shown[-1].cursor if shown else after,
                    has_more=len(rows) > limit)


def _page(engine: sa.Engine, after: str | None, limit: int, types: list[str] | None) -> list[queries.FeedEvent]:
    try:
        return queries.events_after(engine, after=after, limit=limit, types=types)
    except psycopg.Error as exc:
        if exc.sqlstate == PRUNED_SQLSTATE:
            raise CursorPruned(exc.diag.message_primary or "events after this cursor were pruned") from None
        raise
