"""Secrets at rest: access tokens, app secrets and endpoint signing secrets stored in Postgres.

A stored secret is a Fernet token (cryptography's Fernet: AES-128-CBC with an HMAC-SHA256, timestamped) under
WA_OUTBOX_SECRET_KEY, so a `pg_dump` or a look at the table holds nothing usable. The variable takes several
comma-separated keys: the first encrypts, every one decrypts (MultiFernet), so a key is rotated by putting the new
one first, re-encrypting (`wa-outbox secrets rotate-key`), then dropping the old one. Storing a secret without a key
is refused with `SecretKeyMissing`; nothing here ever puts a secret in an error message. What operators see instead
of a secret is its `fingerprint()`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from .config import ConfigError, Settings

SECRET_KEY_VARIABLE = "WA_OUTBOX_SECRET_KEY"


class SecretKeyMissing(ConfigError):
    """A secret was to be stored or read without WA_OUTBOX_SECRET_KEY."""

    def __init__(self, what: str = "a secret") -> None:
        super().__init__(f"{SECRET_KEY_VARIABLE} is not set: storing {what} in Postgres needs it to encrypt it "
                         "(`wa-outbox secrets generate-key` prints a new key)")


class SecretUnreadable(ConfigError):
    """A stored secret none of the configured keys decrypts (a key was dropped too soon, or the wrong key)."""


def generate_key() -> str:
    return Fernet.generate_key().decode("ascii")


def fingerprint(secret: str) -> str:
    """A short, stable name for a secret (its SHA-256's first 12 hex digits): tells two secrets apart, and shows
    which one is in use, without revealing it (tokens and app secrets carry far more than 48 bits)."""
    return "sha256:" + hashlib.sha256(secret.encode("utf-8")).hexdigest()[:12]


class SecretBox:
    """Encrypts and decrypts stored secrets with the configured keys."""

    def __init__(self, keys: Sequence[str]) -> None:
        if not keys:
            raise SecretKeyMissing()
        self._fernet = MultiFernet([Fernet(k.encode("ascii")) for k in keys])

    @classmethod
    def of(cls, settings: Settings, what: str = "a secret") -> SecretBox:
        """The box for these settings; SecretKeyMissing (naming `what`) when WA_OUTBOX_SECRET_KEY is unset."""
        if not settings.secret_keys:
            raise SecretKeyMissing(what)
        return cls(settings.secret_keys)

    def encrypt(self, secret: str) -> bytes:
        return self._fernet.encrypt(secret.encode("utf-8"))

    def decrypt(self, token: bytes) -> str:
        try:
            return self._fernet.decrypt(bytes(token)).decode("utf-8")
        except InvalidToken:
            raise SecretUnreadable(f"a stored secret cannot be decrypted with {SECRET_KEY_VARIABLE}'s keys (was a "
                                   "key removed before `wa-outbox secrets rotate-key` ran?)") from None

    def rotate(self, token: bytes) -> bytes:
        """The token re-encrypted under the first key (unchanged secret)."""
        try:
            return self._fernet.rotate(bytes(token))
        except InvalidToken:
            raise SecretUnreadable(f"a stored secret cannot be decrypted with {SECRET_KEY_VARIABLE}'s keys") from None
