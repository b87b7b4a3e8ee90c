"""The registry's administration: Meta apps and their secrets, business accounts, senders and their tokens, and
the key their secrets are stored under. `wa-outbox apps|senders|secrets …` (cli/), /v1/apps and /v1/senders
(web/account_views.py) all go through these functions, so every rule is checked in one place:

- ids are digits (as the tables' CHECKs), an alias as senders.alias's CHECK, a variable name as a shell's;
- a secret or token comes from a variable read now (`--secret-env`), stdin or a JSON body (`Secret.given`), and is
  stored encrypted under WA_OUTBOX_SECRET_KEY (secret_box.py; SecretKeyMissing before anything is written), or as
  the name of the variable that holds it (`--…-ref`), which must be set (and non-empty) where the command runs;
- a WABA belongs to one app; an app with business accounts is not removed; a business account goes with its last
  sender (the CLI and /v1 create them only through their senders);
- each change is one transaction that ends with `pg_notify('wa_outbox_registry', '')` (accounts_notify.sql), so
  the web and the workers reload their registry (registry.load) when it commits, never before.

Nothing returned, raised or logged here holds a secret: the views carry fingerprints and variable names.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
import sqlalchemy as sa

from . import db, queries
from .config import Settings
from .secret_box import SecretBox, SecretUnreadable, fingerprint

log = logging.getLogger(__name__)

_ID = re.compile(r"[0-9]{1,32}")                             # meta_apps, business_accounts, senders CHECKs
_ALIAS = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,63}")          # senders.alias CHECK
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
_DISPLAY_PHONE_NUMBER = re.compile(r"\+?[0-9][0-9 ()-]{0,31}")
MAX_NAME = 200
MAX_SECRET = 4096                                            # Meta's tokens are a few hundred characters
DEFAULT_OVERLAP_HOURS = 24.0
MAX_OVERLAP_HOURS = 24.0 * 30
MIN_MPS = 0.01                                               # as `ratelimit set --mps`


class AccountError(ValueError):
    """A refused change; str(error) says why (never with a secret). Nothing was changed."""
    status = 400


class InvalidAccount(AccountError):
    """Bad input: an id, alias, variable, overlap or rate that the rules refuse."""


class AccountNotFound(AccountError):
    status = 404


class AccountConflict(AccountError):
    """The registry's state refuses it: a WABA of another app, an alias taken, an app still in use."""
    status = 409


# --- validation: the one place ---------------------------------------------------------------------------------------

def check_id(value: Any, what: str) -> str:
    """An app, WABA, portfolio or phone number id: digits, as Meta gives them (and as the tables' CHECKs say)."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidAccount(f"{what} must be digits (1 to 32), as Meta shows it")
    return value


def check_alias(value: Any) -> str:
    if not isinstance(value, str) or not _ALIAS.fullmatch(value):
        raise InvalidAccount("an alias starts with a letter, then up to 63 letters, digits, '_', '.' or '-'")
    return value


def check_variable(value: Any) -> str:
    if not isinstance(value, str) or not _VARIABLE.fullmatch(value):
        raise InvalidAccount("an environment variable's name is letters, digits and '_', not starting with a digit")
    return value


def check_name(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_NAME or not value.isprintable():
        raise InvalidAccount(f"a name is 1 to {MAX_NAME} printable characters")
    return value


def check_display_phone_number(value: Any) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not _DISPLAY_PHONE_NUMBER.fullmatch(value):
        raise InvalidAccount("a display phone number is digits, with an optional '+', spaces, '-', '(' or ')'")
    return value


def check_overlap(hours: Any) -> float:
    if isinstance(hours, bool) or not isinstance(hours, (int, float)) or not math.isfinite(hours) \
            or not 0 <= hours <= MAX_OVERLAP_HOURS:
        raise InvalidAccount(f"the overlap is 0 to {MAX_OVERLAP_HOURS:g} hours")
    return float(hours)


def check_mps(mps: Any) -> float | None:
    if mps is None:
        return None
    if isinstance(mps, bool) or not isinstance(mps, (int, float)) or not math.isfinite(mps) \
            or mps < MIN_MPS:
        raise InvalidAccount(f"mps (messages per second) is at least {MIN_MPS:g}, as for `ratelimit set`")
    return float(mps)


@dataclass(frozen=True, slots=True)
class Secret:
    """A secret or token to store: its value (to encrypt, and to fingerprint) and, for a reference, the variable's
    name (then only the name is stored). Never in a repr."""
    value: str = field(repr=False)
    ref: str | None = None

    @classmethod
    def from_env(cls, variable: Any, what: str = "the secret") -> Secret:
        """`--secret-env VAR` / `--token-env VAR`: the value of VAR now, stored encrypted."""
        return cls(_read_variable(check_variable(variable), what))

    @classmethod
    def reference(cls, variable: Any, what: str = "the secret") -> Secret:
        """`--secret-ref VAR` / `--token-ref VAR`: only the name is stored, resolved where it is used; it must be
        set here too (a typo would otherwise surface as a failed send or webhook)."""
        name = check_variable(variable)
        return cls(_read_variable(name, what), name)

    @classmethod
    def given(cls, value: Any, what: str = "the secret") -> Secret:
        """A value from stdin or a JSON body (surrounding whitespace, a trailing newline, dropped)."""
        if not isinstance(value, str) or not value.strip():
            raise InvalidAccount(f"{what} is empty")
        return cls(_checked_value(value.strip(), what))

    def stored(self, settings: Settings, what: str) -> tuple[bytes | None, str | None, str]:
        """(encrypted value or None, variable name or None, fingerprint): SecretKeyMissing without a key."""
        if self.ref is not None:
            return None, self.ref, fingerprint(self.value)
        return SecretBox.of(settings, what).encrypt(self.value), None, fingerprint(self.value)


def _read_variable(name: str, what: str) -> str:
    value = os.environ.get(name, "").strip()
    if not value:
        raise InvalidAccount(f"the environment variable {name} ({what}) is not set, or empty")
    return _checked_value(value, what)


def _checked_value(value: str, what: str) -> str:
    if len(value) > MAX_SECRET or not value.isprintable() or any(c.isspace() for c in value):
        raise InvalidAccount(f"{what} is not a single word of up to {MAX_SECRET} printable characters")
    return value


# --- the transaction every change runs in ----------------------------------------------------------------------------

@contextmanager
def _change(engine: sa.Engine) -> Iterator[psycopg.Connection[Any]]:
    """One transaction on a pooled connection, ending with the registry's notification (delivered at commit)."""
    raw = engine.raw_connection()
    try:
        conn = db.psycopg_connection(raw)
        with conn.transaction():
            yield conn
            queries.accounts_notify(conn)
    except psycopg.OperationalError:
        raw.invalidate()
        raise
    finally:
        raw.close()


# --- apps ------------------------------------------------------------------------------------------------------------

def apps(engine: sa.Engine) -> list[queries.AccountApp]:
    return queries.accounts_apps(engine, app_id=None)


def app(engine: sa.Engine, app_id: Any) -> queries.AccountApp:
    found = queries.accounts_apps(engine, app_id=check_id(app_id, "the app id"))
    if not found:
        raise AccountNotFound(f"no app {app_id} is registered")
    return found[0]


def add_app(engine: sa.Engine, settings: Settings, *, app_id: Any, secret: Secret,
            name: Any = None) -> tuple[queries.AccountApp, bool]:
    """Register an app with its secret; (the app, whether it was new). Adding it again with the same secret changes
    nothing (scripts may repeat it); with another secret it is refused: that is `rotate-secret`."""
    app_id, name = check_id(app_id, "the app id"), check_name(name)
    enc, ref, print_ = secret.stored(settings, f"app {app_id}'s secret")
    with _change(engine) as conn:
        created = queries.accounts_app_insert(conn, app_id=app_id, name=name)
        if created:
            queries.accounts_app_secret_insert(conn, app_id=app_id, secret_enc=enc, secret_ref=ref,
                                               fingerprint=print_)
        else:
            locked = queries.accounts_app_lock(conn, app_id=app_id)
            if locked is None or locked.fingerprint != print_:
                raise AccountConflict(f"app {app_id} is registered with another secret "
                                      f"({locked.fingerprint if locked else 'none'}): use `apps rotate-secret`")
    log.info("app %s %s (secret %s)", app_id, "registered" if created else "already registered", print_)
    return app(engine, app_id), created


def rotate_app_secret(engine: sa.Engine, settings: Settings, *, app_id: Any, secret: Secret,
                      overlap_hours: Any = DEFAULT_OVERLAP_HOURS) -> queries.AccountApp:
    """Make `secret` the app's current secret; the one it replaces keeps verifying for `overlap_hours` (0: stops
    now). Older secrets still in an overlap stop now: at most two ever verify."""
    app_id, hours = check_id(app_id, "the app id"), check_overlap(overlap_hours)
    enc, ref, print_ = secret.stored(settings, f"app {app_id}'s secret")
    with _change(engine) as conn:
        locked = queries.accounts_app_lock(conn, app_id=app_id)
        if locked is None:
            raise AccountNotFound(f"no app {app_id} is registered (`apps add` first)")
        if locked.fingerprint == print_:
            raise AccountConflict(f"that is app {app_id}'s current secret already ({print_})")
        if ref is not None and ref == locked.secret_ref and hours > 0:
            # both rows would read the one variable: the previous secret could not verify during the overlap
            raise AccountConflict(f"the current secret is read from {ref} too: put the new secret in another variable "
                                  "(keep the old one set until the overlap ends), or give --overlap 0")
        queries.accounts_app_secret_rotate(conn, app_id=app_id, secret_enc=enc, secret_ref=ref, fingerprint=print_,
                                           overlap_seconds=hours * 3600)
    log.info("app %s: secret rotated to %s (the previous one verifies for %g h)", app_id, print_, hours)
    return app(engine, app_id)


def remove_app(engine: sa.Engine, *, app_id: Any) -> None:
    """Remove an app and its secrets. Refused while business accounts belong to it: its webhooks would then be
    refused while their senders still send (remove the senders first)."""
    app_id = check_id(app_id, "the app id")
    with _change(engine) as conn:
        if queries.accounts_app_lock(conn, app_id=app_id) is None:
            raise AccountNotFound(f"no app {app_id} is registered")
        deleted = queries.accounts_app_delete(conn, app_id=app_id)
        if not deleted.deleted:
            raise AccountConflict(f"app {app_id} still has business accounts ({', '.join(deleted.business_accounts)}):"
                                  " remove their senders first (`wa-outbox senders remove`)")
    log.info("app %s removed", app_id)


# --- senders ---------------------------------------------------------------------------------------------------------

def environment_sender(settings: Settings) -> dict[str, str | None]:
    """The environment's sender (WHATSAPP_PHONE_NUMBER_ID, its token WHATSAPP_ACCESS_TOKEN) as accounts_senders.sql
    and ops_senders.sql take it: its id, token source and fingerprint."""
    token = settings.access_token
    return {"environment_sender": settings.phone_number_id,
            "environment_token_source": "env:WHATSAPP_ACCESS_TOKEN" if token else None,
            "environment_token_fingerprint": fingerprint(token) if token else None}


def senders(engine: sa.Engine, settings: Settings) -> list[queries.AccountSender]:
    """Every registered sender, and the environment's (WHATSAPP_PHONE_NUMBER_ID) unless it is registered."""
    return queries.accounts_senders(engine, phone_number_id=None, **environment_sender(settings))


def sender(engine: sa.Engine, settings: Settings, phone_number_id: Any) -> queries.AccountSender:
    found = queries.accounts_senders(engine, phone_number_id=check_id(phone_number_id, "the phone number id"),
                                     **environment_sender(settings))
    if not found:
        raise AccountNotFound(f"no sender {phone_number_id} is registered")
    return found[0]


def add_sender(engine: sa.Engine, settings: Settings, *, phone_number_id: Any, waba_id: Any, app_id: Any,
               token: Secret, portfolio_id: Any = None, mps: Any = None, alias: Any = None,
               display_phone_number: Any = None,
               follow_meta_throughput: Any = None) -> tuple[queries.AccountSender, bool]:
    """Register a sender, or update it; (the sender, whether it was new). Its business account is created or its
    portfolio updated; a WABA that belongs to another app is refused. Options not given keep their recorded values
    (alias, display number, portfolio); `mps` sets its pacing (`ratelimit set`'s, default burst);
    `follow_meta_throughput` (None: as it was) whether its pacing follows Meta's throughput (set_follow_meta)."""
    phone_number_id = check_id(phone_number_id, "the phone number id")
    follow = check_follow(follow_meta_throughput)
    waba_id, app_id = check_id(waba_id, "the WABA id"), check_id(app_id, "the app id")
    portfolio_id = None if portfolio_id is None else check_id(portfolio_id, "the portfolio id")
    alias = None if alias is None else check_alias(alias)
    display_phone_number, rate = check_display_phone_number(display_phone_number), check_mps(mps)
    enc, ref, print_ = token.stored(settings, f"sender {phone_number_id}'s token")
    with _change(engine) as conn:
        if queries.accounts_app_lock(conn, app_id=app_id) is None:
            raise AccountNotFound(f"no app {app_id} is registered (`wa-outbox apps add {app_id} --secret-env VAR`)")
        account = queries.accounts_business_account_upsert(conn, waba_id=waba_id, app_id=app_id,
                                                           portfolio_id=portfolio_id)
        if not account.written:
            raise AccountConflict(f"WABA {waba_id} belongs to app {account.app_id}, not {app_id}")
        if alias is not None:
            holder = queries.accounts_alias_holder(conn, alias=alias, phone_number_id=phone_number_id)
            if holder is not None:
                raise AccountConflict(f"the alias {alias} is sender {holder}'s")
        written = queries.accounts_sender_upsert(
            conn, phone_number_id=phone_number_id, waba_id=waba_id, alias=alias,
            display_phone_number=display_phone_number, token_enc=enc, token_ref=ref, token_fingerprint=print_)
        if written.previous_waba_id not in (None, waba_id):
            queries.accounts_business_account_drop_if_empty(conn, waba_id=written.previous_waba_id)
        if rate is not None:
            queries.ratelimit_set(conn, phone_number_id=phone_number_id, mps=rate, burst=None, resume=False)
    log.info("sender %s %s (WABA %s, app %s, token %s)", phone_number_id,
             "registered" if written.created else "updated", waba_id, app_id, ref and f"env:{ref}" or print_)
    if follow is not None:
        set_follow_meta(engine, settings, phone_number_id=phone_number_id, follow=follow)
    return sender(engine, settings, phone_number_id), written.created


def check_follow(value: Any) -> bool | None:
    if value is not None and not isinstance(value, bool):
        raise InvalidAccount("follow_meta_throughput is true or false")
    return value


def set_follow_meta(engine: sa.Engine, settings: Settings, *, phone_number_id: Any,
                    follow: Any) -> queries.AccountSender:
    """Whether a registered sender's pacing follows the throughput Meta grants it (phone_number_quality_update:
    THROUGHPUT_UPGRADE is 1,000 messages per second): on, its rate_limits mps becomes that throughput whenever Meta
    reports one, and at once if one is known; off (the default), its pacing is only what `ratelimit set` or
    `senders add --mps` set. Burst is kept either way."""
    phone_number_id = check_id(phone_number_id, "the phone number id")
    wanted = check_follow(follow)
    if wanted is None:
        raise InvalidAccount("follow_meta_throughput is true or false")
    found = queries.number_health_follow(engine, phone_number_id=phone_number_id, follow=wanted)
    if not found:
        raise AccountNotFound(f"no sender {phone_number_id} is registered (`wa-outbox senders add`)")
    if found[0].paced_mps is not None:
        log.info("sender %s follows Meta's throughput: its pacing is now %g messages/s", phone_number_id,
                 found[0].paced_mps)
    return sender(engine, settings, phone_number_id)


def set_token(engine: sa.Engine, settings: Settings, *, phone_number_id: Any,
              token: Secret) -> queries.AccountSender:
    """Replace a sender's token: the next send uses it (the worker reads it at each send)."""
    phone_number_id = check_id(phone_number_id, "the phone number id")
    enc, ref, print_ = token.stored(settings, f"sender {phone_number_id}'s token")
    with _change(engine) as conn:
        if not queries.accounts_sender_set_token(conn, phone_number_id=phone_number_id, token_enc=enc,
                                                 token_ref=ref, token_fingerprint=print_):
            raise AccountNotFound(f"no sender {phone_number_id} is registered (`wa-outbox senders add`)")
    log.info("sender %s: token replaced (%s)", phone_number_id, ref and f"env:{ref}" or print_)
    return sender(engine, settings, phone_number_id)


def remove_sender(engine: sa.Engine, *, phone_number_id: Any) -> str | None:
    """Remove a registered sender; its business account goes with its last sender. Its pacing row stays. Returns
    the business account removed with it, if any. Messages still queued from it are then sent as from an
    unregistered number (with WHATSAPP_ACCESS_TOKEN, if set)."""
    phone_number_id = check_id(phone_number_id, "the phone number id")
    with _change(engine) as conn:
        waba_id = queries.accounts_sender_delete(conn, phone_number_id=phone_number_id)
        if waba_id is None:
            raise AccountNotFound(f"no sender {phone_number_id} is registered")
        dropped = queries.accounts_business_account_drop_if_empty(conn, waba_id=waba_id)
    log.info("sender %s removed%s", phone_number_id, f" with WABA {waba_id}" if dropped else "")
    return waba_id if dropped else None


# --- the secret key --------------------------------------------------------------------------------------------------

def rotate_key(engine: sa.Engine, settings: Settings) -> queries.SecretsRewritten:
    """Re-encrypt every stored secret (apps' secrets, senders' tokens, endpoints' signing secrets) under the first
    key of WA_OUTBOX_SECRET_KEY, in one transaction: all or nothing. A secret no configured key decrypts stops it
    (SecretUnreadable, naming where: the old key was dropped too soon). The procedure: secret_box.py's docstring."""
    box = SecretBox.of(settings, "secrets")
    with _change(engine) as conn:
        queries.secrets_rotate_lock(conn)
        stored = queries.secrets_stored(conn)
        by: dict[str, list[tuple[str, bytes, bytes | None]]] = {"app_secrets": [], "senders": [], "endpoints": []}
        for s in stored:
            try:
                by[s.holder].append((s.id, box.rotate(s.enc),
                                     None if s.previous_enc is None else box.rotate(s.previous_enc)))
            except SecretUnreadable:
                raise SecretUnreadable(f"the secret stored in {s.holder} {s.id} cannot be decrypted with any key of "
                                       "WA_OUTBOX_SECRET_KEY: put the key it was stored under back (nothing was "
                                       "changed)") from None
        done = queries.secrets_rewrite(
            conn, app_ids=[int(i) for i, _, _ in by["app_secrets"]], app_encs=[e for _, e, _ in by["app_secrets"]],
            sender_ids=[i for i, _, _ in by["senders"]], sender_encs=[e for _, e, _ in by["senders"]],
            endpoint_ids=[i for i, _, _ in by["endpoints"]], endpoint_encs=[e for _, e, _ in by["endpoints"]],
            endpoint_previous_encs=[p for _, _, p in by["endpoints"]])
    log.info("secrets re-encrypted under the first key: %s app secrets, %s sender tokens, %s endpoints",
             done.app_secrets, done.senders, done.endpoints)
    return done
