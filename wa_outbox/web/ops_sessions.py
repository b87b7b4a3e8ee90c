"""/ops sessions, kept in Postgres (wa_outbox.ops_sessions in schema.sql): login opens one, logout deletes it, and
every /ops request checks it, so a copied cookie is worth nothing once its session was logged out, expired, or its
token left WA_OUTBOX_API_TOKENS.

The cookie (Flask's signed session) carries a random 256-bit secret; the table holds only its SHA-256, so neither a
`pg_dump` nor a read of the table yields a usable session. The token that opened a session is kept as its
fingerprint, an HMAC-SHA256 under the app secret (never the token, and no offline guessing of it from a dump).

"The app secret" is `signing_secret()`: WHATSAPP_APP_SECRET when set (as always), else WA_OUTBOX_SECRET_KEY's first
key — a secret every web process shares that is in no table, so no dump holds it (Settings.require_web requires it
when WHATSAPP_APP_SECRET is unset).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Iterable

import sqlalchemy as sa

from .. import queries
from ..config import NO_WEBHOOK_SECRET, ConfigError, Settings

LIFETIME_SECONDS = 12 * 3600  # from login, whatever the browser does


def signing_secret(settings: Settings) -> str:
    """What the /ops cookie key and the token fingerprints derive from: WHATSAPP_APP_SECRET when set (sessions open
    before an upgrade stay open), else WA_OUTBOX_SECRET_KEY's first (encrypting) key. Changing it ends every session."""
    if settings.app_secret:
        return settings.app_secret
    if settings.secret_keys:
        return settings.secret_keys[0]
    raise ConfigError(NO_WEBHOOK_SECRET)


def token_fingerprint(app_secret: str | None, token: str) -> bytes:
    """Which API token opened a session, as the table keeps it."""
    return hmac.new((app_secret or "").encode(), b"wa-outbox /ops session token\x00" + token.encode(),
                    hashlib.sha256).digest()


def fingerprints(app_secret: str | None, tokens: Iterable[str]) -> frozenset[bytes]:
    """The fingerprints of the configured tokens: a session opened by any other is no longer a session."""
    return frozenset(token_fingerprint(app_secret, token) for token in tokens)


def _row_id(secret: str) -> bytes | None:
    """The table's id for a cookie's secret (its SHA-256); None for anything that is not one of our secrets."""
    if not isinstance(secret, str) or len(secret) != 43:
        return None
    try:
        raw = base64.urlsafe_b64decode(secret + "=")
    except (binascii.Error, ValueError):
        return None
    return hashlib.sha256(raw).digest() if len(raw) == 32 else None


def open_session(engine: sa.Engine, fingerprint: bytes, lifetime_seconds: int = LIFETIME_SECONDS) -> str:
    """A new session for the token with this fingerprint; returns the secret for the cookie (shown nowhere else)."""
    secret = secrets.token_urlsafe(32)  # 256 bits, 43 characters
    row_id = _row_id(secret)
    assert row_id is not None  # a fresh secret always decodes
    queries.ops_session_open(engine, id=row_id, token_fingerprint=fingerprint,
                             lifetime_seconds=lifetime_seconds)
    return secret


def is_live(engine: sa.Engine, secret: str, configured: frozenset[bytes]) -> bool:
    """Whether the cookie's secret is a live session of a configured token. A session whose token is no longer
    configured is deleted on sight."""
    row_id = _row_id(secret)
    if row_id is None:
        return False
    fingerprint = queries.ops_session_check(engine, id=row_id)
    if fingerprint is None:
        return False
    if fingerprint not in configured:
        queries.ops_session_close(engine, id=row_id)
        return False
    return True


def close_session(engine: sa.Engine, secret: str) -> None:
    row_id = _row_id(secret)
    if row_id is not None:
        queries.ops_session_close(engine, id=row_id)
