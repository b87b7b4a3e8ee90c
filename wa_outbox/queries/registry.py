"""The registry of apps, business accounts and senders (registry.py): what the web verifies webhooks with and the
worker sends with."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from ._run import _rows


@dataclass(frozen=True, slots=True)
class StoredAppSecret:
    app_id: str
    secret_enc: bytes | None = field(repr=False)
    secret_ref: str | None
    fingerprint: str
    expires_at: datetime | None


def registry_app_secrets(engine: sa.Engine) -> list[StoredAppSecret]:
    return _rows(engine, "registry_app_secrets", StoredAppSecret)


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


def registry_senders(engine: sa.Engine) -> list[RegisteredSender]:
    return _rows(engine, "registry_senders", RegisteredSender)


@dataclass(frozen=True, slots=True)
class RegisteredBusinessAccount:
    waba_id: str
    app_id: str
    portfolio_id: str | None


def registry_business_accounts(engine: sa.Engine) -> list[RegisteredBusinessAccount]:
    return _rows(engine, "registry_business_accounts", RegisteredBusinessAccount)


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
