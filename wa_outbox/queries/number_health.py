"""Number health: Meta's quality and throughput reports per sender (number_health), and the pacing that follows it."""

from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from ..number_health import BANNED_STATES
from ._run import _rows


@dataclass(frozen=True, slots=True)
class HealthWritten:
    phone_number_id: str
    throughput_mps: float | None
    paced_mps: float | None  # the rate now set for it, following Meta; None: its pacing was not changed


def record_number_health(engine: sa.Engine, *, entries: str) -> list[HealthWritten]:
    """Apply a batch of number health changes (`entries`: JSON text of number_health.health_update entries)."""
    return _rows(engine, "record_number_health", HealthWritten, {"entries": entries})


@dataclass(frozen=True, slots=True)
class NumberHealthMetric:
    phone_number_id: str
    quality_rating: str | None
    flagged: bool
    quality_dropped: bool  # its last rating change lowered it
    restricted: bool
    banned: bool
    messaging_limit: int | None
    throughput_mps: float | None


def number_health_metrics(engine: sa.Engine) -> list[NumberHealthMetric]:
    return _rows(engine, "number_health_metrics", NumberHealthMetric, {"banned_states": list(BANNED_STATES)})


@dataclass(frozen=True, slots=True)
class FollowSet:
    phone_number_id: str
    follow_meta_throughput: bool
    throughput_mps: float | None
    paced_mps: float | None  # the rate set now; None: unchanged (no throughput known yet, or already that)


def number_health_follow(engine: sa.Engine, *, phone_number_id: str, follow: bool) -> list[FollowSet]:
    """[] when the sender is not registered."""
    return _rows(engine, "number_health_follow", FollowSet, {"phone_number_id": phone_number_id, "follow": follow})
