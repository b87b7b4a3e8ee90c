"""Events for apps: the envelope every receiver sees and the feed's cursor.

An event is one row of `wa_outbox.events`, written in the same transaction as the fact it reports. Apps get it by
pull (GET /v1/events, wa_outbox.events_after(), `wa-outbox events tail`) or by push (endpoints, signed as the
Standard Webhooks specification says). Both render it with `envelope()`, so a pulled event and a pushed one are the
same bytes: `{"id", "type", "timestamp", "data"}` (https://www.standardwebhooks.com/).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import orjson

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
