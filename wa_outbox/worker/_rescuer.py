"""Recover work whose worker died: outbound rows with an expired lease become `unknown` (they may have reached
Meta), webhook events with an expired lease go back to the queue. Any worker runs this; no leader is needed because
every UPDATE is guarded by state and lease expiry."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import db
from ..retry import RetryPolicy

log = logging.getLogger("wa_outbox.rescuer")


def rescue(engine: sa.Engine, worker_id: str, policy: RetryPolicy, limit: int = 1000) -> tuple[int, int]:
    notifications = db.fetch(engine, "rescue_expired_leases", {"worker_id": worker_id, "limit": limit})[0]["rescued"]
    events = db.execute(engine, "rescue_webhook_events", {"limit": limit, "max_attempts": policy.max_attempts})
    if notifications or events:
        log.warning("rescued %d messages (now unknown) and %d webhook events from expired leases",
                    notifications, events)
    return notifications, events
