"""What every command shares: the settings from the environment (logging configured), the CLI's engine, and the
default sender recorded for SQL-side enqueue()."""

from __future__ import annotations

import sys

from .. import logs
from ..config import ConfigError, Settings
from ..db import with_database
from ._errors import ConfigurationError


def _settings(*, service: bool = False) -> Settings:
    """The settings from the environment, with a database; logging configured: to stdout for a service (web, worker:
    the platform collects stdout), to stderr for every other command (its results alone go to stdout)."""
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    logs.configure(settings.log_level, settings.log_format, sys.stdout if service else sys.stderr)
    try:
        return with_database(settings, announce=service)
    except ConfigError as exc:
        raise ConfigurationError(exc) from None



def _engine(settings: Settings):
    from ..db import create_engine
    return create_engine(settings.required("database_url"), pool_size=1, application_name="wa-outbox-cli",
                         isolation_level="AUTOCOMMIT", prepared_statements=settings.db_prepared_statements)



def _record_default_sender(settings: Settings) -> None:
    """Tell SQL-side enqueue() which sender to use when the caller names none."""
    if not settings.phone_number_id:
        return
    from .. import queries
    from ..db import connect
    with connect(settings, autocommit=True) as conn:
        queries.record_default_sender(conn, phone_number_id=settings.phone_number_id)

