"""Deliveries: the push of events to endpoints (dispatch, claim, record, disable, rescue)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ._run import _rows

# --- deliveries: events pushed to endpoints ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Dispatched:
    endpoint_id: str
    scanned: int    # events the endpoint's cursor moved past
    inserted: int   # deliveries created (the events its filter matched)


def dispatch_events(engine: sa.Engine, *, batch: int, backlog: int, by: str = "") -> list[Dispatched]:
    """`backlog`: an endpoint with this many deliveries due and unclaimed is not dispatched to meanwhile. `by`: the
    dispatching worker's id, the payload of the NOTIFY wa_outbox_deliveries that wakes the others."""
    return _rows(engine, "dispatch_events", Dispatched, {"batch": batch, "backlog": backlog, "by": by})


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    id: int
    endpoint_id: str
    event_seq: int
    attempts: int                    # this attempt's number
    tries: int                       # where the retry schedule is (attempts since the last replay)
    url: str
    secret_enc: bytes
    previous_secret_enc: bytes | None
    previous_signs: bool             # a rotation is under way: the previous secret signs too
    type: str
    occurred_at: datetime
    data: dict[str, Any]


def claim_deliveries(engine: sa.Engine, *, worker_id: str, lease_seconds: float, limit: int, per_endpoint: int,
                     held: str) -> list[ClaimedDelivery]:
    """`held`: JSON text, {"endpoint id": deliveries this worker has in flight to it}."""
    return _rows(engine, "claim_deliveries", ClaimedDelivery,
                 {"worker_id": worker_id, "lease_seconds": lease_seconds, "limit": limit,
                  "per_endpoint": per_endpoint, "held": held})


@dataclass(frozen=True, slots=True)
class EndpointFailing:
    endpoint_id: str
    failing_since: datetime | None   # before this batch (None: it starts failing now)
    now: datetime


def record_deliveries(engine: sa.Engine, *, worker_id: str, outcomes: str) -> list[EndpointFailing]:
    """`outcomes`: JSON text (record_deliveries.sql says its shape)."""
    return _rows(engine, "record_deliveries", EndpointFailing, {"worker_id": worker_id, "outcomes": outcomes})


@dataclass(frozen=True, slots=True)
class EndpointDisabled:
    id: str
    url: str
    reason: str


def disable_endpoints(engine: sa.Engine, *, disabled: str) -> list[EndpointDisabled]:
    """`disabled`: JSON text, [{"id", "reason"}]."""
    return _rows(engine, "disable_endpoints", EndpointDisabled, {"disabled": disabled})


@dataclass(frozen=True, slots=True)
class RescuedDelivery:
    id: int
    status: str


def rescue_deliveries(engine: sa.Engine, *, limit: int, max_attempts: int,
                      held_window: float) -> list[RescuedDelivery]:
    """`held_window`: seconds back that held deliveries are checked for a missed wake-up."""
    return _rows(engine, "rescue_deliveries", RescuedDelivery,
                 {"limit": limit, "max_attempts": max_attempts, "held_window": held_window})
