"""Each sender's access token, as this worker sends with it: read from the registry (registry.token_of) the first
time a sender sends, then kept in memory, so a send costs no query.

A rotated token is used from the next send: every registry change NOTIFYs wa_outbox_registry, and the worker's
listener drops the cache (`invalidate`; also after the listener reconnects, having maybe missed one). Without the
listener (WA_OUTBOX_LISTEN=false) the producer asks registry_version.sql, at most once a second, before a claim
(`before_claim`). A send refused for its token is asked about once more (`refresh`): a token changed since it was
read is a rotation, and the message is sent again with the new one.

Tokens never leave this object but towards the transport: no repr, no log line, no error carries one.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime

import sqlalchemy as sa

from .. import queries, registry
from ..config import ConfigError, Settings

VERSION_CHECK_INTERVAL = 1.0  # seconds: without LISTEN, how often the producer may ask whether tokens changed


class Tokens:
    def __init__(self, engine: sa.Engine, settings: Settings, *, poll: bool = False):
        self._engine = engine
        self._settings = settings
        self._poll = poll                   # no listener: check registry_version before claims
        self._lock = threading.Lock()
        self._cache: dict[str, str | ConfigError] = {}  # sender -> token, or why it has none
        self._version: tuple[int, datetime | None] | None = None
        self._checked = -VERSION_CHECK_INTERVAL

    def __repr__(self) -> str:
        return f"<Tokens for {len(self._cache)} senders>"

    def get(self, phone_number_id: str) -> str:
        """The sender's token; ConfigError (registry.NoToken, SecretKeyMissing) when it has none to send with."""
        with self._lock:
            found = self._cache.get(phone_number_id)
        if found is None:
            found = self._read(phone_number_id)
        if isinstance(found, ConfigError):
            raise found
        return found

    def refresh(self, phone_number_id: str) -> str | None:
        """The sender's token read again now (after a send refused for its token): the new token, or None when it
        has none."""
        found = self._read(phone_number_id)
        return None if isinstance(found, ConfigError) else found

    def cached(self, phone_number_id: str) -> bool:
        """Whether the sender's token (or why it has none) is held here (a signal for tests)."""
        with self._lock:
            return phone_number_id in self._cache

    def invalidate(self) -> None:
        with self._lock:
            self._cache.clear()

    def before_claim(self) -> None:
        """Without the listener: drop the cache when a token changed, asking at most once a second."""
        if not self._poll or time.monotonic() - self._checked < VERSION_CHECK_INTERVAL:
            return
        self._checked = time.monotonic()
        found = queries.registry_version(self._engine)
        version = (found.senders, found.tokens_updated_at)
        if self._version is not None and version != self._version:
            self.invalidate()
        self._version = version

    def _read(self, phone_number_id: str) -> str | ConfigError:
        try:
            found: str | ConfigError = registry.token_of(self._engine, self._settings, phone_number_id)
        except ConfigError as exc:  # NoToken (its variable unset), SecretKeyMissing, SecretUnreadable: paused for it
            found = exc
        with self._lock:
            self._cache[phone_number_id] = found
        return found
