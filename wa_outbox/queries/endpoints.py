"""Endpoints: an app's receivers of pushed events (wa_outbox/endpoints.py owns their rules)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from .. import db
from ._run import _one, _rows


@dataclass(frozen=True, slots=True)
class EndpointRow:
    """An endpoint as every surface shows it: never its secret, only the secret's fingerprint."""
    id: str
    url: str
    description: str | None
    event_types: list[str] | None  # None: every type
    ordered: bool
    state: str
    disabled_reason: str | None
    disabled_at: datetime | None
    secret_fingerprint: str
    previous_secret_until: datetime | None  # during a rotation, the old secret signs too until then
    failing_since: datetime | None
    created_at: datetime
    updated_at: datetime
    pending: int  # deliveries queued or in flight (counted up to a cap)
    failed: int   # deliveries whose retries ran out (counted up to a cap)


def add_endpoint(engine: sa.Engine, *, id: str, url: str, description: str | None, event_types: list[str] | None,
                 ordered: bool, secret_enc: bytes, secret_fingerprint: str) -> EndpointRow:
    return _one(engine, "add_endpoint", EndpointRow, {
        "id": id, "url": url, "description": description, "event_types": event_types, "ordered": ordered,
        "secret_enc": secret_enc, "secret_fingerprint": secret_fingerprint})


def list_endpoints(engine: sa.Engine, *, id: str | None, cap: int = 10_000) -> list[EndpointRow]:
    """Every endpoint, or the one with `id` (an empty list when there is none)."""
    return _rows(engine, "list_endpoints", EndpointRow, {"id": id, "cap": cap})


@dataclass(frozen=True, slots=True)
class EndpointStateSet:
    id: str
    state: str
    previous_state: str
    disabled_reason: str | None
    disabled_at: datetime | None


def set_endpoint_state(engine: sa.Engine, *, id: str, state: str, reason: str | None) -> EndpointStateSet | None:
    """None: no such endpoint."""
    found = _rows(engine, "set_endpoint_state", EndpointStateSet, {"id": id, "state": state, "reason": reason})
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class EndpointSecretRotated:
    id: str
    secret_fingerprint: str
    previous_secret_until: datetime


def rotate_endpoint_secret(engine: sa.Engine, *, id: str, secret_enc: bytes, secret_fingerprint: str,
                           overlap_seconds: float) -> EndpointSecretRotated | None:
    """None: no such endpoint."""
    found = _rows(engine, "rotate_endpoint_secret", EndpointSecretRotated, {
        "id": id, "secret_enc": secret_enc, "secret_fingerprint": secret_fingerprint,
        "overlap_seconds": overlap_seconds})
    return found[0] if found else None


def remove_endpoint(engine: sa.Engine, *, id: str) -> bool:
    """Whether there was such an endpoint."""
    return bool(db.fetch(engine, "remove_endpoint", {"id": id}))


@dataclass(frozen=True, slots=True)
class DeliveryRow:
    id: int
    event_seq: int
    event_id: str
    event_type: str | None  # None once the event was pruned
    status: str
    attempts: int
    next_attempt_at: datetime
    last_status_code: int | None
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    delivered_at: datetime | None
    attempt_log: list[dict[str, Any]]  # {attempt, attempted_at, status_code, latency_ms, response_head, error}


def endpoint_deliveries(engine: sa.Engine, *, id: str, failed: bool, limit: int) -> list[DeliveryRow]:
    return _rows(engine, "endpoint_deliveries", DeliveryRow, {"id": id, "failed": failed, "limit": limit})


@dataclass(frozen=True, slots=True)
class Replayed:
    found: int      # 0: no such endpoint
    requeued: int   # deliveries queued again
    inserted: int   # deliveries created for events that had none


def replay_endpoint(engine: sa.Engine, *, id: str, since: datetime | None, failed_only: bool) -> Replayed:
    return _one(engine, "replay_endpoint", Replayed, {"id": id, "since": since, "failed_only": failed_only})


@dataclass(frozen=True, slots=True)
class EndpointOnPage:
    id: str
    url: str
    description: str | None
    event_types: list[str] | None
    ordered: bool
    state: str
    disabled_reason: str | None
    disabled_at: datetime | None
    failing_since: datetime | None
    secret_fingerprint: str
    pending: int
    failed: int
    recent_attempts: list[dict[str, Any]]  # newest first: {delivery_id, attempt, attempted_at, status_code, ...}


def ops_endpoints(engine: sa.Engine, *, limit: int, attempts: int, cap: int) -> list[EndpointOnPage]:
    return _rows(engine, "ops_endpoints", EndpointOnPage, {"limit": limit, "attempts": attempts, "cap": cap})


@dataclass(frozen=True, slots=True)
class EndpointSecret:
    id: str
    state: str
    secret_enc: bytes  # a Fernet token: decrypt with SecretBox, never show


def endpoint_secret_by_url(engine: sa.Engine, *, url: str) -> EndpointSecret | None:
    found = _rows(engine, "endpoint_secret_by_url", EndpointSecret, {"url": url})
    return found[0] if found else None
