"""The /ops page's reads and its sessions (web/ops_sessions.py)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa

from .. import db
from ..number_health import BANNED_STATES
from ..states import SENT_EVENTS
from ._run import WORKER_ALIVE_SECONDS, _ids, _rows

# What the ops charts count as sent (states.SENT_EVENTS), for every query that counts it.
THROUGHPUT_EVENTS = {"sent_events": [str(e) for e in SENT_EVENTS]}

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
    return _rows(engine, "ops_throughput", MinuteFlows, THROUGHPUT_EVENTS)


@dataclass(frozen=True, slots=True)
class SenderMinute:
    """One sender's outcomes in one minute of the last hour (ops_sender_outcomes.sql): only minutes with any."""
    phone_number_id: str
    alias: str | None
    display_phone_number: str | None
    minute: datetime
    sent: int
    delivered: int
    read: int
    failed: int
    dead: int


def ops_sender_outcomes(engine: sa.Engine, *, since: datetime | None) -> list[SenderMinute]:
    return _rows(engine, "ops_sender_outcomes", SenderMinute, {"since": since, **THROUGHPUT_EVENTS})


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
    mps: float | None            # None (with burst, refill, capacity, tokens): no rate set, the workers' default
    burst: float | None
    refill: float | None
    capacity: float | None
    tokens: float | None
    paused: bool
    paused_until: datetime | None
    pause_reason: str | None
    updated_at: datetime | None
    # The registry (accounts.py): never a token, only where it comes from and its fingerprint.
    alias: str | None
    waba_id: str | None
    app_id: str | None
    portfolio_id: str | None
    token_source: str | None     # 'encrypted', 'env:<VARIABLE>'; None: no token known
    token_fingerprint: str | None
    from_environment: bool       # WHATSAPP_PHONE_NUMBER_ID, not registered
    registered: bool
    # Its health as Meta last reported it (number_health.py; None / false: nothing heard yet).
    quality_rating: str | None = None
    flagged: bool = False
    restricted: bool = False
    restricted_until: datetime | None = None
    ban_state: str | None = None
    banned: bool = False         # Meta disabled, or is about to disable, its business account
    messaging_limit_tier: str | None = None
    throughput_level: str | None = None
    follow_meta_throughput: bool = False
    health_changed_at: datetime | None = None


def ops_senders(engine: sa.Engine, *, environment_sender: str | None, environment_token_source: str | None,
                environment_token_fingerprint: str | None) -> list[SenderRow]:
    return _rows(engine, "ops_senders", SenderRow, {
        "environment_sender": environment_sender, "environment_token_source": environment_token_source,
        "environment_token_fingerprint": environment_token_fingerprint, "banned_states": list(BANNED_STATES)})


@dataclass(frozen=True, slots=True)
class UnregisteredRow:
    phone_number_id: str | None  # None: a change without a number (template, account updates), by its WABA
    waba_id: str | None
    app_id: str | None           # the app that verified them (None: WHATSAPP_APP_SECRET)
    updates: int
    last_received: datetime


def ops_unregistered(engine: sa.Engine, *, limit: int) -> list[UnregisteredRow]:
    return _rows(engine, "ops_unregistered", UnregisteredRow, {"limit": limit})


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
