"""Recover work whose worker died: outbound rows with an expired lease become `unknown` (they may have reached
Meta), webhook events with an expired lease go back to the queue. Any worker runs this; no leader is needed because
every UPDATE is guarded by state and lease expiry."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import queries
from ..metrics import WorkerMetrics
from ..retry import RetryPolicy

log = logging.getLogger("wa_outbox.rescuer")


def rescue(engine: sa.Engine, worker_id: str, policy: RetryPolicy, limit: int = 1000,
           metrics: WorkerMetrics | None = None) -> tuple[int, int]:
    notifications = queries.rescue_expired_leases(engine, worker_id=worker_id, limit=limit)
    rescued = queries.rescue_webhook_events(engine, limit=limit, max_attempts=policy.max_attempts)
    events = len(rescued)
    dead = rescued.count("dead")
    if dead and metrics is not None:
        metrics.count("wa_outbox_dead_letters_total", dead, queue="webhook_events")
    if notifications or events:
        log.warning("rescued %d messages (now unknown) and %d webhook events from expired leases",
                    notifications, events)
    return notifications, events
