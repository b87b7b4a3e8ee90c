"""Senders' rate limits and pauses, the sender's hot path (worker/_sender.py), recovery."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import psycopg
import sqlalchemy as sa
from psycopg.rows import class_row

from .. import db
from ._run import _ids, _one, _rows

# --- senders: rate limits and pauses ---------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class RateLimit:
    phone_number_id: str
    mps: float
    burst: float | None
    refill: float
    capacity: float
    tokens: Decimal | None
    paused_until: datetime | None
    pause_reason: str | None
    updated_at: datetime


def ratelimit_show(engine: sa.Engine) -> list[RateLimit]:
    return _rows(engine, "ratelimit_show", RateLimit)


@dataclass(frozen=True, slots=True)
class RateLimitSet:
    phone_number_id: str
    mps: float
    burst: float | None  # None: paced, never more than mps in any one-second window
    paused_until: datetime | None


def ratelimit_set(source: sa.Engine | psycopg.Connection[Any], *, phone_number_id: str, mps: float,
                  burst: float | None, resume: bool) -> RateLimitSet:
    """Set a sender's rate. `burst` None: the default pacing, never more than `mps` in any one-second window; a
    number: a classic token bucket of that size (a one-second window may then hold up to burst + mps). `source`: the
    pool (`ratelimit set`), or the connection of a transaction (`senders add --mps`, accounts.py)."""
    params = {"phone_number_id": phone_number_id, "mps": mps, "burst": burst, "resume": resume}
    if isinstance(source, sa.Engine):
        return _one(source, "ratelimit_set", RateLimitSet, params)
    with source.cursor(row_factory=class_row(RateLimitSet)) as cursor:
        found = cursor.execute(db.query("ratelimit_set"), params).fetchone()
    assert found is not None  # an upsert returns its row
    return found


@dataclass(frozen=True, slots=True)
class SenderResumed:
    phone_number_id: str
    was_paused_until: datetime | None  # None: it was not paused
    pause_reason: str | None
    moved: int   # messages the pause deferred, due now
    woken: int = 0


def resume_sender(engine: sa.Engine, *, phone_number_id: str) -> SenderResumed:
    """Lift a sender's pause now, and make the messages the pause deferred due now. A sender without a bucket yet
    was not paused: was_paused_until None, moved 0."""
    found = _rows(engine, "resume_sender", SenderResumed, {"phone_number_id": phone_number_id})
    return found[0] if found else SenderResumed(phone_number_id, None, None, 0)


def pause_sender(engine: sa.Engine, *, phone_number_id: str, seconds: float, reason: str | None,
                 default_mps: float) -> None:
    db.execute(engine, "pause_sender", {"phone_number_id": phone_number_id, "seconds": seconds, "reason": reason,
                                        "default_mps": default_mps})


def pause_recipient(engine: sa.Engine, *, phone_number_id: str, wa_id: str) -> None:
    db.execute(engine, "pause_recipient", {"phone_number_id": phone_number_id, "wa_id": wa_id})


def record_default_sender(conn: psycopg.Connection[Any], *, phone_number_id: str) -> None:
    """Tell SQL-side enqueue() which sender to use when the caller names none."""
    conn.execute(db.query("record_default_sender"), {"phone_number_id": phone_number_id})

# --- the sender's hot path (worker/_sender.py) -----------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Claimed:
    """A row this worker claimed and must send."""
    id: int
    phone_number_id: str
    recipient: str
    message: dict[str, Any]
    attempts: int
    max_attempts: int | None  # the row's own limit; None: the retry policy's
    correlation_id: str | None
    send_at: float | None = None  # its send slot (seconds since the epoch, the database's clock); None: at once
    slot_margin: float | None = None  # how late after its slot it may still go (schema.sql, slot_margin)
    more: bool = False  # the claim's walk left senders unvisited: a short claim may go on at once


_CLAIMED = class_row(Claimed)


def claim_notifications(engine: sa.Engine, *, limit: int, worker_id: str, lease_seconds: float, default_mps: float,
                        enforce_window: bool, pair_burst: int, pair_interval: float, lead: float, horizon: float,
                        reserved: str, after: str = "") -> list[Claimed]:
    """Claim up to `limit` due rows (`reserved`: the JSON text of reserve_slots_ahead's grants; `after`: the sender
    the walk over the senders starts after, worker/_sender.py next_walk_start). Never repeated."""
    return db.fetch(engine, "claim_notifications", {
        "limit": limit, "worker_id": worker_id, "lease_seconds": lease_seconds, "default_mps": default_mps,
        "enforce_window": enforce_window, "pair_burst": pair_burst, "pair_interval": pair_interval, "lead": lead,
        "horizon": horizon, "reserved": reserved, "after": after}, row_factory=_CLAIMED)


@dataclass(frozen=True, slots=True)
class SlotGrant:
    phone_number_id: str
    granted: int
    slots_from: datetime | None
    level: float | None
    refill: float | None
    paused: bool | None

    def as_json(self) -> dict[str, Any]:
        """As claim_notifications.sql reads a grant from its `reserved` array."""
        return {"phone_number_id": self.phone_number_id, "granted": self.granted, "slots_from": self.slots_from,
                "level": self.level, "refill": self.refill, "paused": self.paused}


def reserve_slots_ahead(engine: sa.Engine, *, senders: list[str], wanted: list[int], unused: list[int],
                        reserved_at: list[datetime | None], default_mps: float, lead: float,
                        horizon: float) -> list[SlotGrant]:
    return _rows(engine, "reserve_slots_ahead", SlotGrant, {
        "senders": senders, "wanted": wanted, "unused": unused, "reserved_at": reserved_at,
        "default_mps": default_mps, "lead": lead, "horizon": horizon})


def record_outcomes(engine: sa.Engine, *, worker_id: str, outcomes: str) -> int:
    """Record sends' outcomes (`outcomes`: JSON text of _outcomes.outcome entries); the rows updated."""
    return db.execute(engine, "record_outcomes", {"worker_id": worker_id, "outcomes": outcomes})


def return_pair_reservations(engine: sa.Engine, *, ids: list[int], worker_id: str, pair_interval: float) -> int:
    """How many rows' pair reservations were given back."""
    return db.fetch(engine, "return_pair_reservations",
                    {"ids": ids, "worker_id": worker_id, "pair_interval": pair_interval})[0]["returned"] or 0


def release_unsent_claims(engine: sa.Engine, *, worker_id: str, in_flight: list[int]) -> list[int]:
    """The ids given back."""
    return _ids(engine, "release_unsent_claims", {"worker_id": worker_id, "in_flight": in_flight})


def next_claim_in(engine: sa.Engine, *, horizon: float) -> float | None:
    """Seconds until a claim would find a row (<= 0: one is due now); None: nothing is queued."""
    found = db.fetch(engine, "next_claim_in", {"horizon": horizon})
    return found[0]["wait_seconds"] if found else None


def database_clock(engine: sa.Engine) -> float:
    """The database's clock, in seconds since the epoch."""
    return db.fetch(engine, "database_clock")[0]["now"]


@dataclass(frozen=True, slots=True)
class CampaignPaused:
    campaign_id: int
    name: str
    moved: int  # messages parked


def pause_campaign_of_message(engine: sa.Engine, *, id: int, actor: str, reason: str | None) -> list[CampaignPaused]:
    return _rows(engine, "pause_campaign_of_message", CampaignPaused, {"id": id, "actor": actor, "reason": reason})

# --- recovery: rescuer, reconciler, analyzer -------------------------------------------------------------------------

def rescue_expired_leases(engine: sa.Engine, *, worker_id: str, limit: int) -> int:
    """How many messages went `unknown`."""
    return db.fetch(engine, "rescue_expired_leases", {"worker_id": worker_id, "limit": limit})[0]["rescued"]


def rescue_webhook_events(engine: sa.Engine, *, limit: int, max_attempts: int) -> list[str]:
    """The new status of each webhook event rescued (queued again, or dead)."""
    return [r["status"] for r in db.fetch(engine, "rescue_webhook_events",
                                          {"limit": limit, "max_attempts": max_attempts})]


@dataclass(frozen=True, slots=True)
class Settled:
    next_status: str
    n: int


def settle_unknown(engine: sa.Engine, *, window_seconds: float, policy: str, limit: int,
                   max_attempts: int) -> list[Settled]:
    return _rows(engine, "settle_unknown", Settled, {"window_seconds": window_seconds, "policy": policy,
                                                     "limit": limit, "max_attempts": max_attempts})


def release_stalled_lines(engine: sa.Engine, *, limit: int) -> list[int]:
    return _ids(engine, "release_stalled_lines", {"limit": limit})


def tables_to_analyze(engine: sa.Engine, *, min_changes: int) -> list[str]:
    """Queue tables without statistics, or changed by more rows than they held at their last analysis (and by at
    least `min_changes`): tables_to_analyze.sql."""
    return [r["relname"] for r in db.fetch(engine, "tables_to_analyze", {"min_changes": min_changes})]
