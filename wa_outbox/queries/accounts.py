"""The registry's administration (accounts.py): apps and their secrets, business accounts, senders and their
tokens, and re-encrypting every stored secret under a new key (`secrets rotate-key`). The writes take the caller's
connection: accounts.py runs each change as one transaction ending in accounts_notify."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

import psycopg
import sqlalchemy as sa
from psycopg.rows import class_row

from .. import db
from ._run import _conn_one, _rows

T = TypeVar("T")


def _conn_first(conn: psycopg.Connection[Any], name: str, cls: type[T], params: dict[str, Any]) -> T | None:
    with conn.cursor(row_factory=class_row(cls)) as cursor:
        return cursor.execute(db.query(name), params).fetchone()


def _conn_column(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> Any:
    with conn.cursor() as cursor:
        found = cursor.execute(db.query(name), params).fetchone()
    return found[0] if found else None


def accounts_notify(conn: psycopg.Connection[Any]) -> None:
    conn.execute(db.query("accounts_notify"))


# --- apps ------------------------------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AccountApp:
    """An app as operators see it: fingerprints and variable names, never a secret."""
    app_id: str
    name: str | None
    secret_fingerprint: str | None
    secret_ref: str | None              # the variable's name; None: stored encrypted
    secret_updated_at: datetime | None
    previous_fingerprint: str | None    # during a rotation: the secret that still verifies ...
    previous_expires_at: datetime | None  # ... until then
    business_accounts: list[str]
    senders: int
    created_at: datetime
    updated_at: datetime


def accounts_apps(engine: sa.Engine, *, app_id: str | None) -> list[AccountApp]:
    return _rows(engine, "accounts_apps", AccountApp, {"app_id": app_id})


@dataclass(frozen=True, slots=True)
class LockedApp:
    app_id: str
    name: str | None
    fingerprint: str | None  # its current secret's
    secret_ref: str | None   # ... and the variable holding it (None: stored encrypted)


def accounts_app_lock(conn: psycopg.Connection[Any], *, app_id: str) -> LockedApp | None:
    return _conn_first(conn, "accounts_app_lock", LockedApp, {"app_id": app_id})


def accounts_app_insert(conn: psycopg.Connection[Any], *, app_id: str, name: str | None) -> bool:
    """Whether the app was new."""
    return _conn_column(conn, "accounts_app_insert", {"app_id": app_id, "name": name}) is not None


def accounts_app_secret_insert(conn: psycopg.Connection[Any], *, app_id: str, secret_enc: bytes | None,
                               secret_ref: str | None, fingerprint: str) -> None:
    conn.execute(db.query("accounts_app_secret_insert"), {
        "app_id": app_id, "secret_enc": secret_enc, "secret_ref": secret_ref, "fingerprint": fingerprint})


@dataclass(frozen=True, slots=True)
class SecretRotated:
    previous_fingerprint: str | None    # None: the previous secret stopped at once (no overlap)
    previous_expires_at: datetime | None
    dropped: int
    added: int
    touched: int


def accounts_app_secret_rotate(conn: psycopg.Connection[Any], *, app_id: str, secret_enc: bytes | None,
                               secret_ref: str | None, fingerprint: str, overlap_seconds: float) -> SecretRotated:
    return _conn_one(conn, "accounts_app_secret_rotate", SecretRotated, {
        "app_id": app_id, "secret_enc": secret_enc, "secret_ref": secret_ref, "fingerprint": fingerprint,
        "overlap_seconds": overlap_seconds})


@dataclass(frozen=True, slots=True)
class AppDeleted:
    deleted: bool
    business_accounts: list[str]  # not deleted because these still belong to it


def accounts_app_delete(conn: psycopg.Connection[Any], *, app_id: str) -> AppDeleted:
    return _conn_one(conn, "accounts_app_delete", AppDeleted, {"app_id": app_id})


# --- business accounts and senders -----------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BusinessAccountWritten:
    waba_id: str
    app_id: str
    portfolio_id: str | None
    written: bool  # False: it belongs to another app (app_id), left alone


def accounts_business_account_upsert(conn: psycopg.Connection[Any], *, waba_id: str, app_id: str,
                                     portfolio_id: str | None) -> BusinessAccountWritten:
    return _conn_one(conn, "accounts_business_account_upsert", BusinessAccountWritten,
                     {"waba_id": waba_id, "app_id": app_id, "portfolio_id": portfolio_id})


def accounts_business_account_drop_if_empty(conn: psycopg.Connection[Any], *, waba_id: str) -> bool:
    """Whether the business account went (it had no sender left)."""
    return _conn_column(conn, "accounts_business_account_drop_if_empty", {"waba_id": waba_id}) is not None


def accounts_alias_holder(conn: psycopg.Connection[Any], *, alias: str, phone_number_id: str) -> str | None:
    return _conn_column(conn, "accounts_alias_holder", {"alias": alias, "phone_number_id": phone_number_id})


@dataclass(frozen=True, slots=True)
class SenderWritten:
    phone_number_id: str
    created: bool
    previous_waba_id: str | None


def accounts_sender_upsert(conn: psycopg.Connection[Any], *, phone_number_id: str, waba_id: str, alias: str | None,
                           display_phone_number: str | None, token_enc: bytes | None, token_ref: str | None,
                           token_fingerprint: str) -> SenderWritten:
    return _conn_one(conn, "accounts_sender_upsert", SenderWritten, {
        "phone_number_id": phone_number_id, "waba_id": waba_id, "alias": alias,
        "display_phone_number": display_phone_number, "token_enc": token_enc, "token_ref": token_ref,
        "token_fingerprint": token_fingerprint})


def accounts_sender_set_token(conn: psycopg.Connection[Any], *, phone_number_id: str, token_enc: bytes | None,
                              token_ref: str | None, token_fingerprint: str) -> bool:
    """Whether the sender is registered (and its token replaced)."""
    return _conn_column(conn, "accounts_sender_set_token", {
        "phone_number_id": phone_number_id, "token_enc": token_enc, "token_ref": token_ref,
        "token_fingerprint": token_fingerprint}) is not None


def accounts_sender_delete(conn: psycopg.Connection[Any], *, phone_number_id: str) -> str | None:
    """The removed sender's business account; None: not registered."""
    return _conn_column(conn, "accounts_sender_delete", {"phone_number_id": phone_number_id})


@dataclass(frozen=True, slots=True)
class AccountSender:
    """A sender as operators see it: its token's source and fingerprint, never the token."""
    phone_number_id: str
    alias: str | None
    waba_id: str | None                 # None (and app_id, portfolio_id): the environment's sender
    app_id: str | None
    portfolio_id: str | None
    display_phone_number: str | None
    token_source: str | None            # 'encrypted', 'env:<VARIABLE>', or None (no token)
    token_fingerprint: str | None
    token_updated_at: datetime | None
    from_environment: bool              # WHATSAPP_PHONE_NUMBER_ID, not registered
    mps: float | None                   # None: no rate set (the workers' WA_OUTBOX_RATE_LIMIT_MPS)
    burst: float | None
    paused: bool
    paused_until: datetime | None
    pause_reason: str | None
    created_at: datetime | None
    updated_at: datetime | None
    # its health as Meta last reported it (number_health.py; None / false: nothing heard yet)
    quality_rating: str | None = None           # GREEN, YELLOW, RED, UNKNOWN
    quality_event: str | None = None            # the last phone_number_quality_update event (FLAGGED, UPGRADE, ...)
    messaging_limit_tier: str | None = None     # TIER_1K, ...
    messaging_limit: int | None = None          # the customers in 24 hours the tier names (None: unlimited/unknown)
    throughput_level: str | None = None         # STANDARD, HIGH
    throughput_mps: float | None = None         # what that level allows
    flagged: bool = False
    restricted: bool = False                    # restrictions recorded, none known to have ended
    restrictions: list[dict[str, Any]] | None = None
    restricted_until: datetime | None = None
    ban_state: str | None = None                # DISABLE, REINSTATE, SCHEDULE_FOR_DISABLE
    account_event: str | None = None            # the last account_update event
    violation_type: str | None = None
    health_changed_at: datetime | None = None
    follow_meta_throughput: bool = False        # its pacing (mps) follows throughput_mps


def accounts_senders(engine: sa.Engine, *, phone_number_id: str | None, environment_sender: str | None,
                     environment_token_source: str | None,
                     environment_token_fingerprint: str | None) -> list[AccountSender]:
    return _rows(engine, "accounts_senders", AccountSender, {
        "phone_number_id": phone_number_id, "environment_sender": environment_sender,
        "environment_token_source": environment_token_source,
        "environment_token_fingerprint": environment_token_fingerprint})


# --- the secret key --------------------------------------------------------------------------------------------------

def secrets_rotate_lock(conn: psycopg.Connection[Any]) -> None:
    conn.execute(db.query("secrets_rotate_lock"))


@dataclass(frozen=True, slots=True)
class StoredSecret:
    holder: str                          # app_secrets, senders, endpoints
    id: str
    enc: bytes = field(repr=False)
    previous_enc: bytes | None = field(repr=False)


def secrets_stored(conn: psycopg.Connection[Any]) -> list[StoredSecret]:
    with conn.cursor(row_factory=class_row(StoredSecret)) as cursor:
        return cursor.execute(db.query("secrets_stored")).fetchall()


@dataclass(frozen=True, slots=True)
class SecretsRewritten:
    app_secrets: int
    senders: int
    endpoints: int


def secrets_rewrite(conn: psycopg.Connection[Any], *, app_ids: list[int], app_encs: list[bytes],
                    sender_ids: list[str], sender_encs: list[bytes], endpoint_ids: list[str],
                    endpoint_encs: list[bytes], endpoint_previous_encs: list[bytes | None]) -> SecretsRewritten:
    return _conn_one(conn, "secrets_rewrite", SecretsRewritten, {
        "app_ids": app_ids, "app_encs": app_encs, "sender_ids": sender_ids, "sender_encs": sender_encs,
        "endpoint_ids": endpoint_ids, "endpoint_encs": endpoint_encs,
        "endpoint_previous_encs": endpoint_previous_encs})
