"""The registry held in memory by a web process, reloaded when it changes: the webhook receiver reads it on every POST
and must not ask Postgres (one statement, the INSERT, per POST).

A trigger on the registry tables (0008_accounts: notify_registry_changed) sends NOTIFY wa_outbox_registry after
every statement that changes them, whoever runs it (the CLI, /v1, plain SQL). A background thread LISTENs on a
connection of its own and reloads on each notification, so an app added or a secret rotated verifies within a
second; it also reloads every REFRESH_SECONDS and after each (re)connect, so a lost notification costs at most that.
With WA_OUTBOX_LISTEN=false (PgBouncer in transaction mode, where a LISTEN stays on one server connection) it reloads
every WA_OUTBOX_POLL_INTERVAL instead. The end of a rotation's overlap needs no reload: a candidate's expires_at is
checked at each POST (webhook_routing.Routes.verify).

A reload that fails (the database away, a secret no key decrypts) keeps the registry it had, and says so in the log.
"""

from __future__ import annotations

import logging
import threading
import time

import psycopg
import sqlalchemy as sa

from . import db, registry
from .config import NO_WEBHOOK_SECRET, ConfigError, Settings, scrub
from .logs import one_line
from .registry import AppSecret, Registry, Sender
from .retry import backoff_seconds
from .webhook_routing import Routes, routes_of

log = logging.getLogger(__name__)

CHANNEL = registry.CHANNEL
REFRESH_SECONDS = 60.0  # a reload at least this often, notification or not
_FAILURE_BACKOFF_CAP = 30.0


class RegistryWatch:
    """`routes` is the registry as of its last reload; it is replaced whole, so a reader sees one registry or the
    next, never a mix."""

    def __init__(self, engine: sa.Engine, settings: Settings) -> None:
        self.engine = engine
        self.settings = settings
        self.registry = environment_only(settings)
        self.routes: Routes = routes_of(self.registry)
        self.reloads = 0  # how many reloads succeeded (tests and logs)
        self.listening = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> RegistryWatch:
        """Load now (`check`), then keep up with changes in a daemon thread."""
        self.check()
        self._thread = threading.Thread(target=self._run, name="registry-watch", daemon=True)
        self._thread.start()
        return self

    def check(self) -> None:
        """Load now. ConfigError when WHATSAPP_APP_SECRET is unset and no app is registered, or the registered apps
        cannot be read; with it set, a registry that cannot be read leaves it verifying alone until one can."""
        try:
            self.reload()
        except (psycopg.Error, sa.exc.SQLAlchemyError, ConfigError) as exc:
            if not self.settings.app_secret:
                raise ConfigError(f"WHATSAPP_APP_SECRET is not set and the registered apps cannot be read: "
                                  f"{self._one_line(exc)}") from None
            log.warning("the registry cannot be read (%s): webhooks verify with WHATSAPP_APP_SECRET alone until it "
                        "can", self._one_line(exc))
        if not self.settings.app_secret and not self.registry.has_apps:
            raise ConfigError(NO_WEBHOOK_SECRET)

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def reload(self, engine: sa.Engine | None = None) -> None:
        found = registry.load(engine or self.engine, self.settings)
        self.registry, self.routes = found, routes_of(found)
        self.reloads += 1
        log.debug("registry loaded: %d app secret(s), %d business account(s), %d sender(s)",
                  len(found.app_secrets), len(found.business_accounts), len(found.senders))

    def _reload_or_keep(self, engine: sa.Engine | None = None) -> None:
        try:
            self.reload(engine)
        except (psycopg.Error, sa.exc.SQLAlchemyError, ConfigError) as exc:
            log.error("the registry could not be reloaded, the previous one stays in use: %s", self._one_line(exc))

    def _run(self) -> None:
        if not self.settings.listen:
            while not self._stopping.wait(self.settings.poll_interval):
                self._reload_or_keep()
            return
        # Reloads connect for themselves (a few a minute): they never wait for, nor hold, a connection of the
        # app's pool, and leave none idle.
        own = sa.create_engine(db.sqlalchemy_url(self.settings.required("database_url")), poolclass=sa.NullPool,
                               isolation_level="AUTOCOMMIT",
                               connect_args={"application_name": "wa-outbox-web-registry", "connect_timeout": 10,
                                             **db.connect_options(self.settings.db_prepared_statements)})
        failures = 0
        while not self._stopping.is_set():
            try:
                with db.connect(self.settings, autocommit=True, connect_timeout=10,
                                application_name="wa-outbox-web-registry") as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    self.listening.set()
                    failures = 0
                    self._reload_or_keep(own)  # whatever changed while nobody listened
                    last = time.monotonic()
                    while not self._stopping.is_set():
                        changed = any(True for _ in conn.notifies(timeout=1.0, stop_after=1))
                        if changed or time.monotonic() - last >= REFRESH_SECONDS:
                            self._reload_or_keep(own)
                            last = time.monotonic()
            except psycopg.Error as exc:
                self.listening.clear()
                failures += 1
                delay = backoff_seconds(failures, base=1.0, cap=_FAILURE_BACKOFF_CAP)
                log.warning("the registry's listener lost its connection (%d in a row), next try in %.1f s: %s",
                            failures, delay, self._one_line(exc))
                self._stopping.wait(delay)
        own.dispose()

    def _one_line(self, exc: BaseException) -> str:
        return scrub(one_line(exc), self.settings.database_url)


def environment_only(settings: Settings) -> Registry:
    """The registry of one the environment describes (WHATSAPP_APP_SECRET, WHATSAPP_PHONE_NUMBER_ID): what the web
    verifies with before the database has answered."""
    senders = {}
    if settings.phone_number_id:
        senders[settings.phone_number_id] = Sender(settings.phone_number_id, None, None, from_environment=True)
    secrets = (AppSecret(None, settings.app_secret),) if settings.app_secret else ()
    return Registry(senders, {}, secrets)


def require_registered_apps(settings: Settings) -> None:
    """Without WHATSAPP_APP_SECRET the web verifies webhooks with the registered apps' secrets alone: ConfigError
    (one line) when none is registered or they cannot be read. For a process that has no engine yet (the gunicorn
    master, before any worker starts)."""
    if settings.app_secret:
        return
    engine = db.create_engine(settings.required("database_url"), pool_size=1, application_name="wa-outbox-web",
                              prepared_statements=settings.db_prepared_statements)
    try:
        RegistryWatch(engine, settings).check()
    finally:
        engine.dispose()
