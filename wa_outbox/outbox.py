"""Operations on the outbox for people and the API: look a message up, the dead-letter queue, rate limits, pruning.
A thin layer over named queries (wa_outbox/sql/), shared by the HTTP API and the CLI."""

from __future__ import annotations

import json
import uuid
from typing import Any

import sqlalchemy as sa

from . import db
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


def prune(engine: sa.Engine, *, days: int) -> tuple[int, int]:
    return _with_prune_allowed(engine, "prune", {"days": days})


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
