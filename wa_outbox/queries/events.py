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
