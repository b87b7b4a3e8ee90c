"""Operations on the outbox for people and the API: look a message up, the dead-letter queue, rate limits, pruning.
A thin layer over named queries (wa_outbox/sql/), shared by the HTTP API and the CLI."""

from __future__ import annotations

import dataclasses
import json
import time
import uuid
from datetime import datetime
from typing import Any, Callable

import psycopg
import sqlalchemy as sa
from psycopg.rows import dict_row

from . import db, states
from .messages import InvalidMessage, check_request, normalize_recipient, validate_ordered

AUTO_KEY_PREFIX = "auto:"


def enqueue(engine: sa.Engine, *, to: Any, message: Any, idempotency_key: Any = None, correlation_id: Any = None,
            phone_number_id: Any = None, key_name: str = "idempotency_key", ordered: Any = True
            ) -> tuple[int, str, bool]:
    """Validate and queue one message (the API's and the CLI's enqueue): (id, status, created), in one autocommit
    statement. `engine` must be an autocommit engine. Raises InvalidMessage before touching the database.

    A request without an idempotency key gets a generated one (`auto:<uuid4>`), so the statement is safe to repeat
    after a lost COMMIT reply: the retry finds the row the first attempt made instead of queuing a second one."""
    checked = check_request(to=to, message=message, idempotency_key=idempotency_key, correlation_id=correlation_id,
                            phone_number_id=phone_number_id, key_name=key_name)
    in_order = validate_ordered(ordered)
    key = checked.idempotency_key or f"{AUTO_KEY_PREFIX}{uuid.uuid4()}"
    row = db.fetch(engine, "enqueue_one", {
        "to": checked.recipient, "message": json.dumps(message, separators=(",", ":")), "idempotency_key": key,
        "correlation_id": checked.correlation_id, "phone_number_id": checked.phone_number_id,
        "ordered": in_order})[0]
    # A generated key is this request's own: a row found by it was created by this request's first attempt.
    return row["id"], row["status"], row["created"] or checked.idempotency_key is None


def get(engine: sa.Engine, notification_id: int) -> dict[str, Any] | None:
    rows = db.fetch(engine, "get_notification", {"id": notification_id})
    return rows[0] if rows else None


def find(engine: sa.Engine, term: str, limit: int = 20) -> list[dict[str, Any]]:
    """Messages to a phone number, or with a correlation id."""
    try:
        recipient = normalize_recipient(term)
    except InvalidMessage:
        recipient = None
    return db.fetch(engine, "find_notifications", {"recipient": recipient, "correlation_id": term, "limit": limit})


def list_dead(engine: sa.Engine, *, limit: int = 50, before_id: int | None = None,
              code: int | None = None) -> list[dict[str, Any]]:
    return db.fetch(engine, "list_dead", {"limit": limit, "before_id": before_id, "code": code})


def requeue(engine: sa.Engine, *, ids: list[int] = (), all_dead: bool = False, code: int | None = None,
            recipient: str | None = None, actor: str) -> list[int]:
    rows = db.fetch(engine, "requeue", {"ids": list(ids), "all": all_dead, "code": code, "recipient": recipient,
                                        "actor": actor})
    return [row["id"] for row in rows]


def _with_prune_allowed(engine: sa.Engine, name: str, params: dict) -> tuple:
    """Run a deleting query in a transaction that opens the append-only timeline's door for itself only."""
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        with raw.transaction():
            raw.execute("SET LOCAL wa_outbox.allow_prune = 'on'")
            return raw.execute(db.query(name), params).fetchone()


def purge_dead(engine: sa.Engine, *, ids: list[int] = (), all_dead: bool = False, older_than_days: int = 0) -> int:
    return _with_prune_allowed(engine, "purge_dead", {"ids": list(ids), "all": all_dead,
                                                      "older_than_days": older_than_days})[0]


MIN_DEDUP_KEY_DAYS = 8  # Meta redelivers a webhook for up to 7 days: a dedup key must outlive that
PRUNE_BATCH = 1000       # messages per batch (with their timelines: a few thousand rows, tens of milliseconds)
PRUNE_WINDOW = 10        # each batch reads at most this many batches' worth of ids, whatever it keeps


@dataclasses.dataclass
class PruneResult:
    """What one `prune` run deleted so far (updated after every batch, so an interrupted run can still report)."""
    messages: int = 0
    events: int = 0                # the messages' timeline events
    webhook_events: int = 0
    batches: int = 0
    seconds: float = 0.0
    longest_batch_seconds: float = 0.0
    phase: str = "messages"        # what is being pruned now: messages, then webhook_events, then ops_sessions
    ops_sessions: int = 0          # /ops sessions past their end (also deleted at every login)
    fraction: float = 0.0          # how far through the phase's old ids

    @property
    def rows(self) -> int:
        return self.messages + self.events + self.webhook_events


def prune(engine: sa.Engine, *, days: int, dead_days: int | None = None, batch_size: int = PRUNE_BATCH,
          progress: Callable[[PruneResult], None] | None = None, result: PruneResult | None = None) -> PruneResult:
    """Retention, in bounded batches that are each their own short transaction, safe while workers run: finished
    messages (states.PRUNABLE_STATUSES) updated more than `days` ago with their timelines, then `done` webhook events
    (their dedup keys and raw bodies) received more than max(`days`, 8) days ago. Dead messages and dead webhook
    events go only when `dead_days` is given (dead webhook events never before 8 days either).

    Each phase walks the primary key from the oldest row to the last one created before its cutoff (found by
    bisection: ids grow with time), `batch_size` rows at a time, skipping rows other transactions hold, so a run costs
    what it deletes, not the table's size, and stopping it anywhere loses at most one batch's work: the next run
    carries on. `progress` is called after every batch with `result`, the running totals."""
    result = result if result is not None else PruneResult()
    started = time.monotonic()
    with engine.connect() as conn:
        raw = conn.connection.driver_connection
        with raw.cursor(row_factory=dict_row) as cursor:
            cutoffs = cursor.execute(db.query("prune_cutoffs"), {
                "days": days, "dead_days": dead_days, "min_key_days": MIN_DEDUP_KEY_DAYS}).fetchone()
            message_params = {"statuses": [str(s) for s in states.PRUNABLE_STATUSES], "before": cutoffs["before"],
                              "dead_before": cutoffs["dead_before"]}
            webhook_params = {"before": cutoffs["keys_before"], "dead_before": cutoffs["dead_keys_before"]}

            def on_batch(row: dict[str, Any], seconds: float, fraction: float) -> None:
                result.messages += row.get("messages", 0)
                result.events += row.get("events", 0)
                result.webhook_events += row.get("webhook_events", 0)
                result.batches += 1
                result.longest_batch_seconds = max(result.longest_batch_seconds, seconds)
                result.seconds, result.fraction = time.monotonic() - started, fraction
                if progress:
                    progress(result)

            result.phase = "messages"
            _prune_walk(cursor, "messages", _latest(cutoffs["before"], cutoffs["dead_before"]), message_params,
                        batch_size, on_batch)
            result.phase, result.fraction = "webhook_events", 0.0
            _prune_walk(cursor, "webhooks", _latest(cutoffs["keys_before"], cutoffs["dead_keys_before"]),
                        webhook_params, batch_size, on_batch)
            result.phase, result.fraction = "ops_sessions", 0.0
            with cursor.connection.transaction():
                result.ops_sessions = cursor.execute(db.query("prune_ops_sessions")).fetchone()["ops_sessions"]
    result.seconds = time.monotonic() - started
    return result


def _latest(*times: datetime | None) -> datetime:
    return max(t for t in times if t is not None)


def _prune_walk(cursor: psycopg.Cursor[dict[str, Any]], table: str, cutoff: datetime, params: dict[str, Any],
                batch_size: int, on_batch: Callable[[dict[str, Any], float, float], None]) -> None:
    """Delete `table`'s prunable rows batch by batch along the primary key, up to the last id created before
    `cutoff` (prune_<table>_probe.sql bisected; later rows cannot be old enough)."""
    def probe(at: int) -> dict[str, Any]:
        row = cursor.execute(db.query(f"prune_{table}_probe"), {"id": at}).fetchone()
        assert row is not None  # the query always returns one row
        return row

    first = probe(0)
    if first["id"] is None or first["created_at"] >= cutoff:
        return
    low, high = first["id"], first["last_id"] + 1  # probe(low) is old; every id >= high is new (or absent)
    while high - low > 1:
        middle = (low + high) // 2
        found = probe(middle)
        if found["id"] is None or found["created_at"] >= cutoff:
            high = middle
        else:
            low = found["id"] if found["id"] < high else middle
    after, until_end, window = first["id"] - 1, low, batch_size * PRUNE_WINDOW
    span = until_end - after
    while after < until_end:
        until = min(until_end, after + window)
        batch_started = time.monotonic()
        with cursor.connection.transaction():
            cursor.execute("SET LOCAL wa_outbox.allow_prune = 'on'")  # the timeline's door, for this batch only
            row = cursor.execute(db.query(f"prune_{table}_batch"),
                                 {**params, "after": after, "until": until, "limit": batch_size}).fetchone()
        assert row is not None  # the query always returns one row
        after = row["next_after"]
        on_batch(row, time.monotonic() - batch_started, min(1.0, (after - first["id"] + 1) / span))


def ratelimits(engine: sa.Engine) -> list[dict[str, Any]]:
    return db.fetch(engine, "ratelimit_show")


def set_ratelimit(engine: sa.Engine, phone_number_id: str, mps: float, burst: float | None,
                  resume: bool) -> dict[str, Any]:
    """Set a sender's rate. `burst` None: the default pacing, never more than `mps` in any one-second window; a
    number: a classic token bucket of that size (a one-second window may then hold up to burst + mps)."""
    return db.fetch(engine, "ratelimit_set", {"phone_number_id": phone_number_id, "mps": mps,
                                              "burst": burst, "resume": resume})[0]


def resume_sender(engine: sa.Engine, phone_number_id: str) -> dict[str, Any]:
    """Lift a sender's pause now, and make the messages the pause deferred due now. Returns phone_number_id,
    was_paused_until (None: it was not paused), pause_reason and moved (how many messages became due); a sender
    without a bucket yet returns was_paused_until None and moved 0."""
    rows = db.fetch(engine, "resume_sender", {"phone_number_id": phone_number_id})
    return rows[0] if rows else {"phone_number_id": phone_number_id, "was_paused_until": None,
                                 "pause_reason": None, "moved": 0}


def cancel(engine: sa.Engine, ids: list[int], *, actor: str) -> dict[int, tuple[str, bool]]:
    """Cancel `queued` messages (the timeline names `actor`: api, cli, …). Returns, for each id that exists, its
    status now and whether this call cancelled it; ids that match no message are absent."""
    rows = db.fetch(engine, "cancel", {"ids": list(ids), "actor": actor})
    return {row["id"]: (row["status"], row["cancelled"]) for row in rows}
