"""Messages: enqueue, look-up, cancel, the dead-letter queue."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa

from .. import db
from ..states import ERROR_IS_HISTORY
from ._run import _ids, _one, _rows

# --- messages: enqueue, look-up, cancel ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Enqueued:
    id: int
    status: str
    created: bool  # false: the idempotency key found an existing row


def enqueue_one(engine: sa.Engine, *, to: str, message: str, idempotency_key: str, correlation_id: str | None,
                phone_number_id: str | None, ordered: bool) -> Enqueued:
    """Queue one checked message (`message`: its JSON text); an existing key returns its row."""
    return _one(engine, "enqueue_one", Enqueued, {
        "to": to, "message": message, "idempotency_key": idempotency_key, "correlation_id": correlation_id,
        "phone_number_id": phone_number_id, "ordered": ordered})


@dataclass(frozen=True, slots=True)
class Notification:
    """One message with its timeline, as the API's GET /v1/messages/<id> and the ops message page show it."""
    id: int
    status: str
    hold_reason: str | None  # states.HoldReason: what holds it while queued (NULL: nothing but its schedule)
    phone_number_id: str
    recipient: str
    message: dict[str, Any]
    attempts: int
    max_attempts: int | None
    next_attempt_at: datetime | None
    last_error: dict[str, Any] | None
    wamid: str | None
    correlation_id: str | None
    idempotency_key: str | None
    created_at: datetime
    updated_at: datetime
    sent_at: datetime | None
    delivered_at: datetime | None
    read_at: datetime | None
    timeline: list[dict[str, Any]]

    @property
    def error_is_history(self) -> bool:
        """Whether `last_error` is an earlier attempt's (the message went through, or was cancelled, after it): shown
        after the outcome as history, not as the message's last error (states.ERROR_IS_HISTORY)."""
        return self.last_error is not None and self.status in ERROR_IS_HISTORY


def get_notification(engine: sa.Engine, *, id: int) -> Notification | None:
    found = _rows(engine, "get_notification", Notification, {"id": id})
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class NotificationSummary:
    id: int
    status: str
    recipient: str
    attempts: int
    wamid: str | None
    correlation_id: str | None
    created_at: datetime
    updated_at: datetime
    last_error: str | None


def find_notifications(engine: sa.Engine, *, recipient: str | None, correlation_id: str | None,
                       limit: int) -> list[NotificationSummary]:
    return _rows(engine, "find_notifications", NotificationSummary,
                 {"recipient": recipient, "correlation_id": correlation_id, "limit": limit})


@dataclass(frozen=True, slots=True)
class Cancellation:
    id: int
    status: str      # the message's status now
    cancelled: bool  # whether this call cancelled it


def cancel(engine: sa.Engine, *, ids: list[int], actor: str) -> list[Cancellation]:
    return _rows(engine, "cancel", Cancellation, {"ids": ids, "actor": actor})

# --- the dead-letter queue -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DeadMessage:
    id: int
    status: str
    recipient: str
    phone_number_id: str
    attempts: int
    last_error: dict[str, Any] | None
    correlation_id: str | None
    created_at: datetime
    died_at: datetime | None


def list_dead(engine: sa.Engine, *, limit: int, before_id: int | None = None,
              code: int | None = None) -> list[DeadMessage]:
    return _rows(engine, "list_dead", DeadMessage, {"limit": limit, "before_id": before_id, "code": code})


def requeue(engine: sa.Engine, *, ids: list[int], all: bool, code: int | None, recipient: str | None,
            actor: str) -> list[int]:
    """The ids requeued."""
    return _ids(engine, "requeue", {"ids": ids, "all": all, "code": code, "recipient": recipient, "actor": actor})


def purge_dead(conn: psycopg.Connection[Any], *, ids: list[int], all: bool, older_than_days: int) -> int:
    """How many dead messages were deleted. Run it where wa_outbox.allow_prune is on (outbox.purge_dead)."""
    found = conn.execute(db.query("purge_dead"),
                         {"ids": ids, "all": all, "older_than_days": older_than_days}).fetchone()
    assert found is not None  # a count always returns one row
    return found[0]
