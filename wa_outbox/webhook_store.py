"""Inbound webhooks, the storing part: one POST's events in one set-based statement."""

from __future__ import annotations

import json
from typing import Iterable

import sqlalchemy as sa

from .db import query
from .webhooks import WebhookEvent


def store_events(engine: sa.Engine, events: Iterable[WebhookEvent], correlation_id: str | None) -> int:
    """Insert the events not seen before; return how many were new. One statement, so one transaction and one
    round trip: autocommit, because a single INSERT is atomic on its own and BEGIN/COMMIT would cost two more."""
    unique = {e.dedup_key: e for e in reversed(list(events))}  # first occurrence wins within a batch
    if not unique:
        return 0
    rows = unique.values()
    params = {
        "correlation_id": correlation_id,
        "dedup_keys": [e.dedup_key for e in rows],
        "fields": [e.field for e in rows],
        "kinds": [e.kind for e in rows],
        "account_ids": [e.account_id for e in rows],
        "phone_number_ids": [e.phone_number_id for e in rows],
        "wamids": [e.wamid for e in rows],
        "update_statuses": [e.update_status for e in rows],
        "payloads": [json.dumps(e.payload, separators=(",", ":")) for e in rows],
    }
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        return conn.exec_driver_sql(query("insert_webhook_events"), params).rowcount
