"""Recover work whose worker died: outbound rows with an expired lease become `unknown` (they may have reached
Meta), webhook events with an expired lease go back to the queue. Any worker runs this; no leader is needed because
every UPDATE is guarded by state and lease expiry."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import db

log = logging.getLogger("wa_outbox.rescuer")


def rescue(engine: sa.Engine, worker_id: str, limit: int = 1000) -> tuple[int, int]:
    rows, _ = db.run(engine, "rescue_expired_leases", {"worker_id": worker_id, "limit": limit})
    notifications = rows[0][0] if rows else 0
    _, events = db.run(engine, "rescue_webhook_events", {"limit": limit})
    if notifications or events:
        log.warning("rescued %d messages (now unknown) and %d webhook events from expired leases",
                    notifications, events)
    return notifications, events
