"""Events for apps: the feed."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ._run import _rows


@dataclass(frozen=True, slots=True)
class FeedEvent:
    cursor: str
    seq: int
    type: str
    timestamp: datetime
    data: dict[str, Any]


def events_after(engine: sa.Engine, *, after: str | None, limit: int, types: list[str] | None) -> list[FeedEvent]:
    """At most `limit` events after cursor `after` (None: from the oldest kept), in feed order."""
    return _rows(engine, "events_after", FeedEvent, {"after": after, "limit": limit, "types": types})


@dataclass(frozen=True, slots=True)
class WebhookEventEvent:
    webhook_event_id: int
    seq: int
    type: str
    occurred_at: datetime
    data: dict[str, Any]


def events_of_webhook_events(engine: sa.Engine, *, ids: list[int]) -> list[WebhookEventEvent]:
    """The feed events written for these stored webhook events (none for statuses)."""
    return _rows(engine, "events_of_webhook_events", WebhookEventEvent, {"ids": ids})
