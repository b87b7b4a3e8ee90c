"""Settle `unknown` messages that no status webhook settled within the window, by the configured policy (resend, or
dead). Status webhooks settle them first, in the inbound pipeline; this is the fallback."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import db

log = logging.getLogger("wa_outbox.reconciler")


def settle_unknown(engine: sa.Engine, window_seconds: float, policy: str, limit: int = 1000) -> dict[str, int]:
    rows, _ = db.run(engine, "settle_unknown", {"window_seconds": window_seconds, "policy": policy, "limit": limit})
    settled = dict(rows)
    if settled:
        log.warning("settled unknown messages past the %.0f s window: %s", window_seconds, settled)
    return settled
