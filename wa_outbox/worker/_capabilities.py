"""business_capability_update webhooks → the portfolio's messaging limit (portfolios.py): Meta announces a new limit
in max_daily_conversations_per_business (https://developers.facebook.com/docs/whatsapp/messaging-limits), for the
WABA in entry[].id; the WABA's portfolio takes it, and a raised limit releases what the old one held at once. The
event for apps (business.capability) is written by the webhook store's trigger, whatever happens here."""

from __future__ import annotations

import logging

import sqlalchemy as sa

from .. import logs, portfolios, queries
from ..messaging_limit import capability_limit
from ..queries import WebhookEvent

log = logging.getLogger(__name__)


def apply_capability_updates(engine: sa.Engine, events: list[WebhookEvent]) -> dict[int, str]:
    """Apply each update in arrival order; the events that could not be applied, with why (retried by the caller).
    An update without a messaging limit, or for a WABA of no known portfolio, is done (nothing to change)."""
    failures: dict[int, str] = {}
    for update in queries.capability_updates(engine, ids=[e.id for e in events]):
        names, limit = capability_limit(update.value)
        if not names or not update.account_id:
            continue
        try:
            released = portfolios.set_limit_of_business_account(engine, waba_id=update.account_id,
                                                                messaging_limit=limit)
        except Exception as exc:  # noqa: BLE001 - one bad update never holds back the others: retried
            failures[update.id] = f"{type(exc).__name__}: {exc}"[:500]
            continue
        if released is not None:
            logs.events.info("business account %s: messaging limit %s (business_capability_update), %d released",
                             update.account_id, "unlimited" if limit is None else limit, released)
    return failures
