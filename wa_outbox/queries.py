"""The typed query layer: one function per named query in wa_outbox/sql/ (the function is named as its file), with
keyword-only typed parameters, returning rows as frozen dataclasses named for what the row is (built by psycopg's
`class_row`, no per-row work beyond the dict row it replaces), a scalar, a count or None.

The functions taking an engine run through db.fetch / db.execute: one autocommit statement on a pooled connection,
tried once more after a dropped connection only when the file's header says `-- Safe to repeat:` (db.safe_to_repeat).
The few taking a psycopg connection (`conn`) run inside a transaction the caller holds (pruning, start-up).
tests/test_query_layer.py checks that every SQL file has its function and every function its file.

JSON parameters (`*_json`-documented `str`) are JSON text the caller encoded: the hot paths encode once, here nothing
is encoded again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa
from psycopg.rows import class_row
from psycopg.types.json import Jsonb

from . import db

T = TypeVar("T")

WORKER_ALIVE_SECONDS = 30  # as wa_outbox_workers_alive counts them (queue_metrics.sql)


def _rows(engine: sa.Engine, name: str, cls: type[T], params: dict[str, Any] | None = None) -> list[T]:
    return db.fetch(engine, name, params, row_factory=class_row(cls))


def _one(engine: sa.Engine, name: str, cls: type[T], params: dict[str, Any] | None = None) -> T:
    """The single row a query always returns (an aggregate, a function call)."""
    return _rows(engine, name, cls, params)[0]


def _ids(engine: sa.Engine, name: str, params: dict[str, Any]) -> list[int]:
    return [r["id"] for r in db.fetch(engine, name, params)]


def _conn_one(conn: psycopg.Connection[Any], name: str, cls: type[T], params: dict[str, Any]) -> T:
    with conn.cursor(row_factory=class_row(cls)) as cursor:
        found = cursor.execute(db.query(name), params).fetchone()
    assert found is not None  # these queries always return one row
    return found


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


def ratelimit_set(engine: sa.Engine, *, phone_number_id: str, mps: float, burst: float | None,
                  resume: bool) -> RateLimitSet:
    """Set a sender's rate. `burst` None: the default pacing, never more than `mps` in any one-second window; a
    number: a classic token bucket of that size (a one-second window may then hold up to burst + mps)."""
    return _one(engine, "ratelimit_set", RateLimitSet,
                {"phone_number_id": phone_number_id, "mps": mps, "burst": burst, "resume": resume})


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


_CLAIMED = class_row(Claimed)


def claim_notifications(engine: sa.Engine, *, limit: int, worker_id: str, lease_seconds: float, default_mps: float,
                        enforce_window: bool, pair_burst: int, pair_interval: float, lead: float, horizon: float,
                        reserved: str) -> list[Claimed]:
    """Claim up to `limit` due rows (`reserved`: the JSON text of reserve_slots_ahead's grants). Never repeated."""
    return db.fetch(engine, "claim_notifications", {
        "limit": limit, "worker_id": worker_id, "lease_seconds": lease_seconds, "default_mps": default_mps,
        "enforce_window": enforce_window, "pair_burst": pair_burst, "pair_interval": pair_interval, "lead": lead,
        "horizon": horizon, "reserved": reserved}, row_factory=_CLAIMED)


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


def tables_never_analyzed(engine: sa.Engine) -> list[str]:
    return [r["relname"] for r in db.fetch(engine, "tables_never_analyzed")]


# --- workers: heartbeats and metrics ---------------------------------------------------------------------------------

def heartbeat(engine: sa.Engine, *, worker_id: str, hostname: str, pid: int, state: str, info: str) -> None:
    """`info`: JSON text."""
    db.execute(engine, "heartbeat", {"worker_id": worker_id, "hostname": hostname, "pid": pid, "state": state,
                                     "info": info})


def worker_gone(engine: sa.Engine, *, worker_id: str) -> None:
    db.execute(engine, "worker_gone", {"worker_id": worker_id})


@dataclass(frozen=True, slots=True)
class MetricSeries:
    metric: str
    labels: dict[str, str]


def record_worker_metrics(engine: sa.Engine, *, worker_id: str, metrics: str) -> list[MetricSeries]:
    """Write a worker's metrics (`metrics`: JSON text); the series retired under it meanwhile."""
    return _rows(engine, "record_worker_metrics", MetricSeries, {"worker_id": worker_id, "metrics": metrics})


def retire_worker_metrics(engine: sa.Engine, *, stopping_worker_id: str | None) -> None:
    db.execute(engine, "retire_worker_metrics", {"stopping_worker_id": stopping_worker_id})


@dataclass(frozen=True, slots=True)
class MetricTotal:
    metric: str
    labels: dict[str, str]
    value: float


def worker_metrics_totals(engine: sa.Engine) -> list[MetricTotal]:
    return _rows(engine, "worker_metrics_totals", MetricTotal)


@dataclass(frozen=True, slots=True)
class QueueCount:
    queue: str
    status: str
    rows: int
    age: Decimal  # seconds the oldest row has waited (0: none waits; workers: since the last heartbeat, -1: never)


def queue_metrics(engine: sa.Engine) -> list[QueueCount]:
    return _rows(engine, "queue_metrics", QueueCount)


# --- inbound: webhook events -----------------------------------------------------------------------------------------

def insert_webhook_events(engine: sa.Engine, *, events: Jsonb) -> set[str]:
    """Store events (a JSON array); the dedup keys that were new."""
    return {r["dedup_key"] for r in db.fetch(engine, "insert_webhook_events", {"events": events})}


def insert_webhook_events_with_bodies(engine: sa.Engine, *, events: Jsonb, digests: list[str],
                                      bodies: list[bytes]) -> set[str]:
    """As insert_webhook_events, with the raw bodies some events keep (by their sha256 digest)."""
    return {r["dedup_key"] for r in db.fetch(engine, "insert_webhook_events_with_bodies",
                                             {"events": events, "digests": digests, "bodies": bodies})}


@dataclass(frozen=True, slots=True)
class WebhookEvent:
    id: int
    kind: str
    field: str | None
    phone_number_id: str | None
    wamid: str | None
    update_status: str | None
    payload: dict[str, Any]
    attempts: int
    max_attempts: int | None
    correlation_id: str | None


def claim_webhook_events(engine: sa.Engine, *, limit: int, worker_id: str,
                         lease_seconds: float) -> list[WebhookEvent]:
    return _rows(engine, "claim_webhook_events", WebhookEvent,
                 {"limit": limit, "worker_id": worker_id, "lease_seconds": lease_seconds})


def renew_webhook_leases(engine: sa.Engine, *, ids: list[int], worker_id: str, lease_seconds: float) -> list[int]:
    """The ids still held."""
    return _ids(engine, "renew_webhook_leases", {"ids": ids, "worker_id": worker_id, "lease_seconds": lease_seconds})


def finish_webhook_events(engine: sa.Engine, *, worker_id: str, outcomes: str) -> None:
    """`outcomes`: JSON text."""
    db.execute(engine, "finish_webhook_events", {"worker_id": worker_id, "outcomes": outcomes})


@dataclass(frozen=True, slots=True)
class StatusApplied:
    event_id: int
    notification_id: int | None
    status: str
    disposition: str  # applied, retry (its send is still being recorded) or unmatched


def apply_statuses(engine: sa.Engine, *, statuses: str) -> list[StatusApplied]:
    """`statuses`: JSON text of _inbound.status_entry entries."""
    return _rows(engine, "apply_statuses", StatusApplied, {"statuses": statuses})


def record_inbound_messages(engine: sa.Engine, *, messages: str) -> None:
    """`messages`: JSON text of _inbound.contact_of entries."""
    db.execute(engine, "record_inbound_messages", {"messages": messages})


# --- campaigns -------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class CampaignChunk:
    campaign_id: int
    campaign_status: str
    inserted: int
    present: int  # already there (same idempotency key)


def enqueue_campaign(engine: sa.Engine, *, name: str, phone_number_id: str | None, default_sender: str | None,
                     items: str) -> CampaignChunk:
    """Write one chunk (`items`: JSON text) of campaign `name`, creating it with the first."""
    return _one(engine, "enqueue_campaign", CampaignChunk, {
        "name": name, "phone_number_id": phone_number_id, "default_sender": default_sender, "items": items})


@dataclass(frozen=True, slots=True)
class CampaignSteered:
    campaign_id: int
    name: str
    status: str
    previous_status: str
    moved: int


def steer_campaign(engine: sa.Engine, *, name: str, action: str, actor: str, reason: str | None) -> CampaignSteered:
    return _one(engine, "steer_campaign", CampaignSteered,
                {"name": name, "action": action, "actor": actor, "reason": reason})


@dataclass(frozen=True, slots=True)
class CampaignRow:
    id: int
    name: str
    phone_number_id: str
    status: str
    pause_reason: str | None
    created_at: datetime
    updated_at: datetime
    counts: dict[str, int] | None
    total: int
    sender_mps: float | None
    started_at: datetime | None
    sent_last_minute: int | None


def campaign_summaries(engine: sa.Engine, *, name: str | None) -> list[CampaignRow]:
    return _rows(engine, "campaign_summaries", CampaignRow, {"name": name})


# --- the /ops page ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class QueueDepth:
    queue: str
    status: str
    rows: int
    capped: bool
    oldest_age_seconds: Decimal | None


def ops_queue_depth(engine: sa.Engine, *, cap: int) -> list[QueueDepth]:
    return _rows(engine, "ops_queue_depth", QueueDepth, {"cap": cap})


@dataclass(frozen=True, slots=True)
class MinuteFlows:
    minute: datetime
    entered: int
    sent: int
    failed: int
    dead: int
    cancelled: int


def ops_throughput(engine: sa.Engine) -> list[MinuteFlows]:
    return _rows(engine, "ops_throughput", MinuteFlows)


@dataclass(frozen=True, slots=True)
class WorkerRow:
    id: str
    hostname: str
    pid: int
    state: str
    started_at: datetime
    heartbeat_at: datetime
    heartbeat_age_seconds: Decimal | None
    info: dict[str, Any]

    @property
    def alive(self) -> bool:
        return self.heartbeat_age_seconds is not None and float(self.heartbeat_age_seconds) < WORKER_ALIVE_SECONDS


def ops_workers(engine: sa.Engine) -> list[WorkerRow]:
    return _rows(engine, "ops_workers", WorkerRow)


@dataclass(frozen=True, slots=True)
class SenderRow:
    phone_number_id: str
    mps: float
    burst: float | None
    refill: float
    capacity: float
    tokens: float | None
    paused: bool
    paused_until: datetime | None
    pause_reason: str | None
    updated_at: datetime


def ops_senders(engine: sa.Engine) -> list[SenderRow]:
    return _rows(engine, "ops_senders", SenderRow)


@dataclass(frozen=True, slots=True)
class DeadGroup:
    code: str        # '' for none
    count: int
    newest_id: int
    samples: list[dict[str, Any]]


def ops_dead_groups(engine: sa.Engine, *, groups: int, samples: int) -> list[DeadGroup]:
    return _rows(engine, "ops_dead_groups", DeadGroup, {"groups": groups, "samples": samples})


def ops_dead_group_ids(engine: sa.Engine, *, code: str, up_to_id: int, before_id: int | None,
                       limit: int) -> list[int]:
    return _ids(engine, "ops_dead_group_ids",
                {"code": code, "up_to_id": up_to_id, "before_id": before_id, "limit": limit})


@dataclass(frozen=True, slots=True)
class CampaignOnPage:
    id: int
    name: str
    phone_number_id: str
    status: str
    pause_reason: str | None
    created_at: datetime
    updated_at: datetime
    counts: dict[str, int]


def ops_campaigns(engine: sa.Engine, *, limit: int) -> list[CampaignOnPage]:
    return _rows(engine, "ops_campaigns", CampaignOnPage, {"limit": limit})


@dataclass(frozen=True, slots=True)
class SearchHit:
    id: int
    status: str
    recipient: str
    phone_number_id: str
    attempts: int
    wamid: str | None
    correlation_id: str | None
    created_at: datetime
    updated_at: datetime
    last_error: str | None


def ops_search(engine: sa.Engine, *, id: int | None, recipient: str | None, term: str,
               limit: int) -> list[SearchHit]:
    return _rows(engine, "ops_search", SearchHit, {"id": id, "recipient": recipient, "term": term, "limit": limit})


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


# --- the SQL console (`wa-outbox db query`, `db support-role`: cli/db_console.py) -------------------------------------
# Each runs on the console's own connection, inside the transaction it holds (the read-only one of `db query`), never
# on a pooled connection of its own.

def console_begin(conn: psycopg.Connection[Any], *, statement_timeout: str, lock_timeout: str,
                  role: str | None) -> None:
    """First in `db query`'s READ ONLY transaction: its statement and lock timeouts (`'30000ms'`) and the role to run
    as (None: the connection's), for this transaction only."""
    with conn.cursor() as cursor:
        cursor.execute(db.query("console_begin"),
                       {"statement_timeout": statement_timeout, "lock_timeout": lock_timeout, "role": role})


@dataclass(frozen=True, slots=True)
class VolatileCall:
    kind: str    # function or operator
    schema: str
    name: str


def console_volatile_calls(conn: psycopg.Connection[Any], *, function_schemas: list[str], function_names: list[str],
                           operator_schemas: list[str], operator_names: list[str]) -> list[VolatileCall]:
    """The VOLATILE functions (and operators' functions) among the names a statement uses, each name given as its
    schema ('' unqualified) and name, in two parallel lists per kind."""
    with conn.cursor(row_factory=class_row(VolatileCall)) as cursor:
        return cursor.execute(db.query("console_volatile_calls"), {
            "function_schemas": function_schemas, "function_names": function_names,
            "operator_schemas": operator_schemas, "operator_names": operator_names}).fetchall()


@dataclass(frozen=True, slots=True)
class SupportRoleState:
    exists: bool
    privileged: bool         # a superuser, or may create roles or databases, replicate or bypass row security
    is_me: bool              # the role running this (current or session user)
    i_am_superuser: bool
    i_am_member: bool | None  # None: the role does not exist
    views: list[str]         # every view of schema wa_outbox, by name


def support_role_state(conn: psycopg.Connection[Any], *, name: str) -> SupportRoleState:
    return _conn_one(conn, "support_role_state", SupportRoleState, {"name": name})


# --- /ops sessions (web/ops_sessions.py) ----------------------------------------------------------------------------

def ops_session_open(engine: sa.Engine, *, id: bytes, token_fingerprint: bytes, lifetime_seconds: int) -> None:
    """A new /ops session: `id` the SHA-256 of its cookie secret; the expired ones go in the same statement."""
    db.execute(engine, "ops_session_open", {"id": id, "token_fingerprint": token_fingerprint,
                                            "lifetime_seconds": lifetime_seconds})


def ops_session_check(engine: sa.Engine, *, id: bytes) -> bytes | None:
    """The fingerprint of the token that opened the live session `id`; None: logged out or expired."""
    found = db.fetch(engine, "ops_session_check", {"id": id})
    return bytes(found[0]["token_fingerprint"]) if found else None


def ops_session_close(engine: sa.Engine, *, id: bytes) -> None:
    db.execute(engine, "ops_session_close", {"id": id})
