"""The registry of apps, business accounts and senders (registry.py): what the web verifies webhooks with and the
worker sends with."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import psycopg
import sqlalchemy as sa

from ._run import _conn_rows, _rows


@dataclass(frozen=True, slots=True)
class StoredAppSecret:
    app_id: str
    secret_enc: bytes | None = field(repr=False)
    secret_ref: str | None
    fingerprint: str
    expires_at: datetime | None


def registry_app_secrets(conn: psycopg.Connection[Any]) -> list[StoredAppSecret]:
    return _conn_rows(conn, "registry_app_secrets", StoredAppSecret)


@dataclass(frozen=True, slots=True)
class RegisteredSender:
    phone_number_id: str
    waba_id: str
    app_id: str
    portfolio_id: str | None
    alias: str | None
    display_phone_number: str | None
    token_fingerprint: str | None
    token_updated_at: datetime


def registry_senders(conn: psycopg.Connection[Any]) -> list[RegisteredSender]:
    return _conn_rows(conn, "registry_senders", RegisteredSender)


@dataclass(frozen=True, slots=True)
class RegisteredBusinessAccount:
    waba_id: str
    app_id: str
    portfolio_id: str | None


def registry_business_accounts(conn: psycopg.Connection[Any]) -> list[RegisteredBusinessAccount]:
    return _conn_rows(conn, "registry_business_accounts", RegisteredBusinessAccount)


@dataclass(frozen=True, slots=True)
class StoredToken:
    token_enc: bytes | None = field(repr=False)
    token_ref: str | None
    token_fingerprint: str | None
    token_updated_at: datetime


def sender_token(engine: sa.Engine, *, phone_number_id: str) -> StoredToken | None:
    found = _rows(engine, "sender_token", StoredToken, {"phone_number_id": phone_number_id})
    return found[0] if found else None


@dataclass(frozen=True, slots=True)
class RegistryVersion:
    senders: int
    tokens_updated_at: datetime | None


def registry_version(engine: sa.Engine) -> RegistryVersion:
    return _rows(engine, "registry_version", RegistryVersion)[0]
