"""Business portfolios and Meta's messaging limit: show them, set a limit (`wa-outbox portfolios set`, PUT
/v1/portfolios/<id>, a business_capability_update webhook). The budget itself is spent by the claim
(claim_notifications.sql); the rules are in messaging_limit.py."""

from __future__ import annotations

import json
from typing import Any

import psycopg
import sqlalchemy as sa

from . import db, queries
from .accounts import AccountNotFound, InvalidAccount, check_id
from .messaging_limit import campaign_finish, parse_limit

SOURCES = ("operator", "webhook")


def check_limit(value: Any) -> int | None:
    try:
        return parse_limit(value)
    except ValueError as exc:
        raise InvalidAccount(str(exc)) from None


def portfolios(engine: sa.Engine) -> list[queries.Portfolio]:
    return queries.portfolios(engine, portfolio_id=None)


def portfolio(engine: sa.Engine, portfolio_id: Any) -> queries.Portfolio:
    found = queries.portfolios(engine, portfolio_id=check_id(portfolio_id, "the portfolio id"))
    if not found:
        raise AccountNotFound(f"no business account belongs to portfolio {portfolio_id} "
                              "(give it with `wa-outbox senders add --portfolio`)")
    return found[0]


def set_limit(engine: sa.Engine, *, portfolio_id: Any, messaging_limit: Any,
              source: str = "operator") -> tuple[queries.Portfolio, int]:
    """Set the portfolio's limit (None or "unlimited": none enforced); (the portfolio, messages released). A raised
    limit releases every message it held, in one statement."""
    portfolio_id = check_id(portfolio_id, "the portfolio id")
    limit = check_limit(messaging_limit)
    assert source in SOURCES
    raw = engine.raw_connection()
    try:
        conn = db.psycopg_connection(raw)
        with conn.transaction():
            locked = queries.portfolio_lock(conn, portfolio_id=portfolio_id)
            if not locked.known and locked.previous_limit is None:
                raise AccountNotFound(f"no business account belongs to portfolio {portfolio_id} "
                                      "(give it with `wa-outbox senders add --portfolio`)")
            done = queries.set_portfolio_limit(conn, portfolio_id=portfolio_id, messaging_limit=limit, source=source)
    except psycopg.OperationalError:
        raw.invalidate()
        raise
    finally:
        raw.close()
    return portfolio(engine, portfolio_id), done.released


def set_limit_of_business_account(engine: sa.Engine, *, waba_id: str, messaging_limit: int | None) -> int | None:
    """A business_capability_update for WABA `waba_id`: its portfolio's limit; messages released, or None when the
    WABA belongs to no portfolio wa-outbox knows."""
    portfolio_id = queries.portfolio_of_business_account(engine, waba_id=waba_id)
    if portfolio_id is None:
        return None
    return set_limit(engine, portfolio_id=portfolio_id, messaging_limit=messaging_limit, source="webhook")[1]


def campaign_figures(engine: sa.Engine, *, sender: str | None, recipients: list[str] | None = None,
                     campaign_id: int | None = None) -> dict[str, Any]:
    """A campaign at its portfolio's messaging limit (`recipients`: of a file's templates, for a dry run; or the
    queued templates of `campaign_id`): how many will count, how many the portfolio has left, when it finishes at
    this limit (messaging_limit.campaign_finish; None: never, a limit of 0). The JSON of `messaging_limit` in
    campaign show / GET /v1/campaigns/<name> and of `campaign import --dry-run`."""
    row = queries.campaign_limit_figures(engine, sender=sender, campaign_id=campaign_id,
                                         recipients=None if recipients is None else json.dumps(recipients))
    finish = campaign_finish(row.counting, row.remaining, row.messaging_limit, row.units, row.at)
    return {"portfolio_id": row.portfolio_id, "messaging_limit": row.messaging_limit, "used": row.used,
            "remaining": row.remaining, "recipients": row.recipients, "counting": row.counting,
            "held_until_units_free": max(0, row.counting - (row.remaining if row.remaining is not None
                                                            else row.counting)),
            "finishes_at": finish, "finishes_never": finish is None}


def figures_text(f: dict[str, Any]) -> str:
    """One line for people: the figures of campaign_figures."""
    if f["portfolio_id"] is None:
        return "messaging limit: the sender belongs to no known business portfolio (nothing is held)"
    if f["messaging_limit"] is None:
        return (f"messaging limit: none set for portfolio {f['portfolio_id']} (nothing is held); "
                f"{f['counting']} of {f['recipients']} recipients would count")
    when = ("never at a limit of 0" if f["finishes_never"] else
            f"{f['finishes_at']:%Y-%m-%d %H:%M:%S} UTC at the earliest")
    return (f"messaging limit: {f['counting']} of {f['recipients']} recipients will count against portfolio "
            f"{f['portfolio_id']}'s {f['messaging_limit']} (it has {f['remaining']} left; "
            f"{f['held_until_units_free']} wait for units to free); finishes {when} at this limit")
