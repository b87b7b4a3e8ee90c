"""The registry: the Meta apps, business accounts (WABAs) and sender numbers one deployment serves.

Postgres holds them (meta_apps, app_secrets, business_accounts, senders: schema.sql, "Accounts"), managed with
`wa-outbox apps …` / `wa-outbox senders …` and /v1/apps, /v1/senders. Today's single-number environment is a
registry of one that lives in the environment and keeps working unchanged:
- WHATSAPP_APP_SECRET verifies webhooks as the app `None` (beside every registered app's secrets);
- WHATSAPP_PHONE_NUMBER_ID is a sender (unless it is registered: the table wins);
- WHATSAPP_ACCESS_TOKEN sends for every sender that is not registered (as it always has).

`load()` reads everything but tokens (a few rows, read when the web or a worker (re)loads it); `token_of()` reads one
sender's token when a send needs it, so a rotated token is used from the next send. Secrets are decrypted with
secret_box.SecretBox and never put in a repr, a log line or an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

import psycopg
import sqlalchemy as sa

from . import db, queries
from .config import ConfigError, Settings
from .secret_box import SecretBox, SecretKeyMissing

# The channel every change of the registry notifies at commit (accounts.py, accounts_notify.sql; no payload): the web
# and the workers LISTEN on it (or poll) and call load() again.
CHANNEL = "wa_outbox_registry"


class UnknownSender(ValueError):
    """A message names a sender (phone number id or alias) the registry does not hold, or names none when there is
    no default."""


class NoToken(ConfigError):
    """A sender has no access token to send with (not registered and WHATSAPP_ACCESS_TOKEN unset, or its
    --token-ref variable is unset)."""


@dataclass(frozen=True, slots=True)
class AppSecret:
    """A secret that verifies webhook signatures."""
    app_id: str | None                 # None: the environment's WHATSAPP_APP_SECRET
    secret: str = field(repr=False)
    fingerprint: str | None = None
    expires_at: datetime | None = None  # during a rotation, the previous secret's end; None: current


@dataclass(frozen=True, slots=True)
class Sender:
    phone_number_id: str
    waba_id: str | None                 # None: the environment's sender (WHATSAPP_PHONE_NUMBER_ID)
    app_id: str | None
    portfolio_id: str | None = None
    alias: str | None = None
    display_phone_number: str | None = None
    token_fingerprint: str | None = None
    from_environment: bool = False


@dataclass(frozen=True, slots=True)
class BusinessAccount:
    waba_id: str
    app_id: str
    portfolio_id: str | None


@dataclass(frozen=True)
class Registry:
    senders: Mapping[str, Sender]
    business_accounts: Mapping[str, BusinessAccount]
    app_secrets: tuple[AppSecret, ...]
    aliases: Mapping[str, str] = field(default_factory=dict)  # alias -> phone number id

    @property
    def default_sender(self) -> str | None:
        """The sender a message without one goes from: the only sender there is, else none (the environment's
        WHATSAPP_PHONE_NUMBER_ID is the default of a single-number deployment, as before)."""
        env = [s.phone_number_id for s in self.senders.values() if s.from_environment]
        if env:
            return env[0]
        return next(iter(self.senders)) if len(self.senders) == 1 else None

    def resolve_sender(self, value: str | None) -> str | None:
        """The phone number id a message's `phone_number_id` (or alias) stands for. None in, the default out (None
        when there is no default: the caller then refuses the message or lets the database's default apply). An
        unregistered phone number id is accepted as today (sent with WHATSAPP_ACCESS_TOKEN); an unknown alias is
        not (UnknownSender)."""
        if value is None:
            return self.default_sender
        if value in self.aliases:
            return self.aliases[value]
        if not value.isdigit():
            raise UnknownSender(f"no sender has the alias {value!r}")
        return value

    def is_registered(self, phone_number_id: str | None) -> bool:
        return phone_number_id is not None and phone_number_id in self.senders

    def app_of_waba(self, waba_id: str | None) -> str | None:
        account = self.business_accounts.get(waba_id) if waba_id else None
        return account.app_id if account else None

    @property
    def has_apps(self) -> bool:
        return any(s.app_id is not None for s in self.app_secrets)


def _stored_secret(box: SecretBox | None, enc: bytes | None, ref: str | None, what: str) -> str | None:
    if ref is not None:
        return os.environ.get(ref, "").strip() or None
    if enc is None:
        return None
    if box is None:
        raise SecretKeyMissing(what)
    return box.decrypt(enc)


def load(engine: sa.Engine, settings: Settings) -> Registry:
    """The registry as the database and the environment say now."""
    box = SecretBox(settings.secret_keys) if settings.secret_keys else None
    secrets: list[AppSecret] = []
    if settings.app_secret:
        secrets.append(AppSecret(None, settings.app_secret))
    app_secrets, business_accounts, registered = _snapshot(engine)
    for row in app_secrets:
        value = _stored_secret(box, row.secret_enc, row.secret_ref, f"app {row.app_id}'s secret")
        if value:
            secrets.append(AppSecret(row.app_id, value, row.fingerprint, row.expires_at))
    accounts = {a.waba_id: BusinessAccount(a.waba_id, a.app_id, a.portfolio_id)
                for a in business_accounts}
    senders: dict[str, Sender] = {}
    aliases: dict[str, str] = {}
    for s in registered:
        senders[s.phone_number_id] = Sender(s.phone_number_id, s.waba_id, s.app_id, s.portfolio_id, s.alias,
                                            s.display_phone_number, s.token_fingerprint)
        if s.alias:
            aliases[s.alias] = s.phone_number_id
    if settings.phone_number_id and settings.phone_number_id not in senders:
        senders[settings.phone_number_id] = Sender(settings.phone_number_id, None, None, from_environment=True)
    return Registry(senders, accounts, tuple(secrets), aliases)


_SNAPSHOT_TRIES = 5
_SNAPSHOT_LOCK_TIMEOUT_MS = 200


def _snapshot(engine: sa.Engine) -> tuple[list[queries.StoredAppSecret], list[queries.RegisteredBusinessAccount],
                                          list[queries.RegisteredSender]]:
    """The apps' secrets, business accounts and senders as of one moment: read in one REPEATABLE READ transaction,
    so a reload that runs while an app and its sender are being registered never sees the sender without the app's
    secret (three autocommit reads could, and the web then refused that number's webhooks until the next reload)."""
    for attempt in range(1, _SNAPSHOT_TRIES + 1):
        conn = engine.raw_connection()
        try:
            pg = db.psycopg_connection(conn)
            pg.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
            try:
                # The transaction holds its first table's lock while it asks for the next: beside a statement that
                # locks them all exclusively in another order (a migration, a TRUNCATE), it would deadlock. It gives
                # way first instead (well before deadlock_timeout's 1 s) and tries again.
                pg.execute(f"SET LOCAL lock_timeout = '{_SNAPSHOT_LOCK_TIMEOUT_MS}ms'")
                return (queries.registry_app_secrets(pg), queries.registry_business_accounts(pg),
                        queries.registry_senders(pg))
            finally:
                pg.execute("ROLLBACK")  # read only: nothing to commit
        except psycopg.errors.LockNotAvailable:
            if attempt == _SNAPSHOT_TRIES:
                raise
            time.sleep(0.05 * attempt)
        except psycopg.OperationalError:
            conn.invalidate()  # never hand a broken connection out again
            raise
        finally:
            conn.close()
    raise AssertionError("unreachable")  # the loop returns or raises


def token_of(engine: sa.Engine, settings: Settings, phone_number_id: str) -> str:
    """The access token to send from `phone_number_id` with, resolved now: the registered sender's (decrypted, or
    read from its --token-ref variable), else WHATSAPP_ACCESS_TOKEN. NoToken when there is none."""
    stored = queries.sender_token(engine, phone_number_id=phone_number_id)
    if stored is None:
        if settings.access_token:
            return settings.access_token
        raise NoToken(f"sender {phone_number_id} is not registered and WHATSAPP_ACCESS_TOKEN is not set")
    box = SecretBox(settings.secret_keys) if settings.secret_keys else None
    token = _stored_secret(box, stored.token_enc, stored.token_ref, f"sender {phone_number_id}'s token")
    if not token:
        raise NoToken(f"sender {phone_number_id}'s token variable {stored.token_ref} is not set")
    return token
