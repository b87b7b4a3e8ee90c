"""Inbound webhooks, the storing part: one POST's events in one set-based statement."""

from __future__ import annotations

import json
from typing import Iterable

import psycopg
import sqlalchemy as sa

from .db import query
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
    try:
        return _insert(engine, params)
    except psycopg.OperationalError:
        # The database restarted or failed over, so every pooled connection is dead: drop the idle ones and try once
        # more on a new connection. Safe: the INSERT is idempotent (ON CONFLICT DO NOTHING).
        engine.pool.dispose()
        return _insert(engine, params)


def _insert(engine: sa.Engine, params: dict) -> int:
    conn = engine.raw_connection()  # the psycopg connection itself: this path is hot, SQLAlchemy adds nothing here
    try:
        with conn.cursor() as cursor:
            cursor.execute(query("insert_webhook_events"), params)
            return cursor.rowcount
    except psycopg.OperationalError:
        conn.invalidate()  # never hand a broken connection out again
        raise
    finally:
        conn.close()  # back to the pool
