"""Inbound webhooks, the storing part: one POST's events in one set-based statement."""

from __future__ import annotations

import json
from typing import Iterable

import sqlalchemy as sa

from .db import run
from .webhooks import WebhookEvent


def store_events(engine: sa.Engine, events: Iterable[WebhookEvent], correlation_id: str | None) -> int:
    """Insert the events not seen before; return how many were new.

    One statement, hence one transaction and one round trip: `engine` should be in autocommit mode (a single
    INSERT is atomic on its own; BEGIN and COMMIT would cost two more round trips)."""
    rows = [{"k": e.dedup_key, "f": e.field, "t": e.kind, "a": e.account_id, "p": e.phone_number_id,
             "w": e.wamid, "s": e.update_status, "v": e.payload} for e in events]
    if not rows:
        return 0
    params = {"correlation_id": correlation_id, "events": json.dumps(rows, separators=(",", ":"))}
    return run(engine, "insert_webhook_events", params)[1]
