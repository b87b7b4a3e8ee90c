"""Campaigns."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from ._run import _one, _rows

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
