"""Pruning (in the caller's transaction) and the schema's version (start-up, `db downgrade`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa

from .. import db
from ._run import _conn_one

# --- pruning (in the caller's transaction: the timeline's door is opened per batch) --------------------------------

@dataclass(frozen=True, slots=True)
class PruneCutoffs:
    before: datetime | None
    dead_before: datetime | None
    keys_before: datetime | None
    dead_keys_before: datetime | None


def prune_cutoffs(conn: psycopg.Connection[Any], *, days: int, dead_days: int | None,
                  min_key_days: int) -> PruneCutoffs:
    return _conn_one(conn, "prune_cutoffs", PruneCutoffs,
                     {"days": days, "dead_days": dead_days, "min_key_days": min_key_days})


@dataclass(frozen=True, slots=True)
class PruneProbe:
    """The first row at or after an id: its id and creation time (None: no row), and the table's last id."""
    id: int | None
    created_at: datetime | None
    last_id: int | None


def prune_messages_probe(conn: psycopg.Connection[Any], *, id: int) -> PruneProbe:
    return _conn_one(conn, "prune_messages_probe", PruneProbe, {"id": id})


def prune_webhooks_probe(conn: psycopg.Connection[Any], *, id: int) -> PruneProbe:
    return _conn_one(conn, "prune_webhooks_probe", PruneProbe, {"id": id})


def prune_ops_sessions(conn: psycopg.Connection[Any]) -> int:
    """Delete the /ops sessions past their end; how many went."""
    with conn.cursor() as cursor:
        found = cursor.execute(db.query("prune_ops_sessions")).fetchone()
    return found[0] if found else 0


@dataclass(frozen=True, slots=True)
class PrunedMessages:
    messages: int
    events: int
    next_after: int


def prune_messages_batch(conn: psycopg.Connection[Any], *, after: int, until: int, limit: int, statuses: list[str],
                         before: datetime | None, dead_before: datetime | None) -> PrunedMessages:
    return _conn_one(conn, "prune_messages_batch", PrunedMessages, {
        "after": after, "until": until, "limit": limit, "statuses": statuses, "before": before,
        "dead_before": dead_before})


@dataclass(frozen=True, slots=True)
class PrunedWebhooks:
    webhook_events: int
    next_after: int


def prune_webhooks_batch(conn: psycopg.Connection[Any], *, after: int, until: int, limit: int,
                         before: datetime | None, dead_before: datetime | None) -> PrunedWebhooks:
    return _conn_one(conn, "prune_webhooks_batch", PrunedWebhooks, {
        "after": after, "until": until, "limit": limit, "before": before, "dead_before": dead_before})


@dataclass(frozen=True, slots=True)
class PrunedEvents:
    events: int
    deliveries: int
    more: bool        # the batch was full of old events: there may be more


def prune_events_batch(conn: psycopg.Connection[Any], *, limit: int, days: int) -> PrunedEvents:
    """One batch of the events feed's retention: events older than `days` days."""
    return _conn_one(conn, "prune_events_batch", PrunedEvents, {"limit": limit, "days": days})

# --- schema (start-up, `db downgrade`) -------------------------------------------------------------------------------

def schema_version(source: sa.Engine | psycopg.Connection[Any]) -> str | None:
    """The migration the database is at (alembic's version table); None: none recorded. `source`: the pool (/readyz)
    or a one-off connection (the worker's start-up check)."""
    if isinstance(source, sa.Engine):
        found = db.fetch(source, "schema_version")
        return found[0]["version_num"] if found else None
    row = source.execute(db.query("schema_version")).fetchone()
    return row[0] if row else None


def drop_empty_schema(conn: psycopg.Connection[Any]) -> None:
    """Drop alembic's empty version table and the schema once nothing of wa-outbox's is left."""
    conn.execute(db.query("drop_empty_schema"))
