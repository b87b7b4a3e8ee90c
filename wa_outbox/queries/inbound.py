"""Inbound: webhook events."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from psycopg.types.json import Jsonb

from .. import db
from ._run import _ids, _rows

# --- inbound: webhook events -----------------------------------------------------------------------------------------

def insert_webhook_events(engine: sa.Engine, *, events: Jsonb) -> set[str]:
    """Store events (a JSON array); the dedup keys that were new."""
    return {r["dedup_key"] for r in db.fetch(engine, "insert_webhook_events", {"events": events})}


def insert_webhook_events_with_bodies(engine: sa.Engine, *, events: Jsonb, digests: list[str],
                                      bodies: list[bytes]) -> set[str]:
    """As insert_webhook_events, with the raw bodies some events keep (by their sha256 digest)."""
    return {r["dedup_key"] for r in db.fetch(engine, "insert_webhook_events_with_bodies",
                                             {"events": events, "digests": digests, "bodies": bodies})}


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    id: int
    kind: str
    field: str | None
    phone_number_id: str | None
    wamid: str | None
    update_status: str | None
    payload: dict[str, Any]
    attempts: int
    max_attempts: int | None
    correlation_id: str | None


def claim_webhook_events(engine: sa.Engine, *, limit: int, worker_id: str,
                         lease_seconds: float) -> list[WebhookEvent]:
    return _rows(engine, "claim_webhook_events", WebhookEvent,
                 {"limit": limit, "worker_id": worker_id, "lease_seconds": lease_seconds})


def renew_webhook_leases(engine: sa.Engine, *, ids: list[int], worker_id: str, lease_seconds: float) -> list[int]:
    """The ids still held."""
    return _ids(engine, "renew_webhook_leases", {"ids": ids, "worker_id": worker_id, "lease_seconds": lease_seconds})


def finish_webhook_events(engine: sa.Engine, *, worker_id: str, outcomes: str) -> None:
    """`outcomes`: JSON text."""
    db.execute(engine, "finish_webhook_events", {"worker_id": worker_id, "outcomes": outcomes})


@dataclass(frozen=True, slots=True)
class StatusApplied:
    event_id: int
    notification_id: int | None
    status: str
    disposition: str  # applied, retry (its send is still being recorded) or unmatched
    reconciled: bool  # this batch settled its message as sent (states.SENT_EVENTS): count it once per message


def apply_statuses(engine: sa.Engine, *, statuses: str) -> list[StatusApplied]:
    """`statuses`: JSON text of _inbound.status_entry entries."""
    return _rows(engine, "apply_statuses", StatusApplied, {"statuses": statuses})


def record_inbound_messages(engine: sa.Engine, *, messages: str, id_lifetime: float) -> int:
    """`messages`: JSON text of _inbound.contact_of entries (with media_policy.media_of's fields for media);
    `id_lifetime`: seconds a media id stays fetchable (media_policy.ID_LIFETIME_SECONDS). Returns how many media rows
    it created (to fetch)."""
    rows = db.fetch(engine, "record_inbound_messages", {"messages": messages, "id_lifetime": id_lifetime})
    return int(rows[0]["media"]) if rows else 0
