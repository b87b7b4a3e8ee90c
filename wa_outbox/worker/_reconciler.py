"""Settle `unknown` messages that no status webhook settled within the window, by the configured policy (resend, or
dead). Status webhooks settle them first, in the inbound pipeline; this is the fallback. A message with a stored status
event still to be processed is left for that event; one whose status event went `dead` is dead, not resent on a guess
(settle_unknown.sql)."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import queries
from ..retry import RetryPolicy

log = logging.getLogger("wa_outbox.reconciler")


def settle_unknown(engine: sa.Engine, window_seconds: float, policy: str, retry: RetryPolicy,
                   limit: int = 1000) -> dict[str, int]:
    rows = queries.settle_unknown(engine, window_seconds=window_seconds, policy=policy, limit=limit,
                                  max_attempts=retry.max_attempts)
    settled = {row.next_status: row.n for row in rows}
    if settled:
        log.warning("settled unknown messages past the %.0f s window: %s", window_seconds, settled)
    return settled


def release_stalled_lines(engine: sa.Engine, limit: int = 1000) -> list[int]:
    """Release the parked first message of any recipient line with nothing going (a release missed by a race)."""
    released = queries.release_stalled_lines(engine, limit=limit)
    if released:
        log.info("released %d parked messages whose line had nothing going", len(released),
                 extra={"notification_ids": released[:100]})
    return released
