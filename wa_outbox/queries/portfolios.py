"""Business portfolios and their messaging limit (portfolios.py; the claim's side is claim_notifications.sql)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa

from ._run import _conn_one, _rows


@dataclass(frozen=True, slots=True)
class Portfolio:
    portfolio_id: str
    messaging_limit: int | None      # None: none enforced
    limit_source: str | None         # 'operator' or 'webhook'; None: never set
    updated_at: datetime | None
    used: int                        # customers counted in the last 24 hours
    remaining: int | None            # None: no limit
    next_unit_frees_at: datetime | None
    queued: int                      # messages waiting in its senders ...
    held: int                        # ... of which held by the limit
    business_accounts: list[str]
    senders: list[str]


def portfolios(engine: sa.Engine, *, portfolio_id: str | None) -> list[Portfolio]:
    return _rows(engine, "portfolios", Portfolio, {"portfolio_id": portfolio_id})


@dataclass(frozen=True, slots=True)
class PortfolioLocked:
    previous_limit: int | None
    known: bool


def portfolio_lock(conn: psycopg.Connection[Any], *, portfolio_id: str) -> PortfolioLocked:
    return _conn_one(conn, "portfolio_lock", PortfolioLocked, {"portfolio_id": portfolio_id})


@dataclass(frozen=True, slots=True)
class PortfolioLimitSet:
    released: int
    woken: int
    updated: int


def set_portfolio_limit(conn: psycopg.Connection[Any], *, portfolio_id: str, messaging_limit: int | None,
                        source: str) -> PortfolioLimitSet:
    return _conn_one(conn, "set_portfolio_limit", PortfolioLimitSet,
                     {"portfolio_id": portfolio_id, "messaging_limit": messaging_limit, "source": source})


@dataclass(frozen=True, slots=True)
class PortfolioOf:
    portfolio_id: str


def portfolio_of_business_account(engine: sa.Engine, *, waba_id: str) -> str | None:
    found = _rows(engine, "portfolio_of_business_account", PortfolioOf, {"waba_id": waba_id})
    return found[0].portfolio_id if found else None


@dataclass(frozen=True, slots=True)
class CapabilityUpdate:
    id: int
    account_id: str | None
    value: Any


def capability_updates(engine: sa.Engine, *, ids: list[int]) -> list[CapabilityUpdate]:
    return _rows(engine, "capability_updates", CapabilityUpdate, {"ids": ids})


@dataclass(frozen=True, slots=True)
class CampaignLimitFigures:
    phone_number_id: str | None      # the sender, as registered; None: not registered (no portfolio known)
    portfolio_id: str | None
    messaging_limit: int | None
    used: int
    remaining: int | None
    recipients: int                  # customers the campaign would send a template to
    counting: int                    # of them, those who would take a unit
    units: list[datetime]            # the portfolio's units in the window, oldest first
    at: datetime


def campaign_limit_figures(engine: sa.Engine, *, sender: str | None, recipients: str | None,
                           campaign_id: int | None) -> CampaignLimitFigures:
    return _rows(engine, "campaign_limit_figures", CampaignLimitFigures,
                 {"sender": sender, "recipients": recipients, "campaign_id": campaign_id})[0]
