"""`wa-outbox db`: schema migrations (alembic) and the SQL console."""

from __future__ import annotations

import click

from ..config import Settings
from ._common import _record_default_sender, _settings
from .db_console import db_query, db_support_role


@click.group()
def db() -> None:
    """Schema migrations (alembic)."""


@db.command("upgrade")
@click.argument("revision", required=False)
@click.option("--revision", "revision_option", hidden=True, help="The same as REVISION (older spelling).")
def db_upgrade(revision: str | None, revision_option: str | None) -> None:
    """Apply migrations up to REVISION (default `head`; `+1` one step) — the Procfile's release phase."""
    from .. import migrate
    settings = _settings()
    migrate.upgrade(settings.required("database_url"), revision or revision_option or "head",
                    prepared_statements=settings.db_prepared_statements)
    _record_default_sender(settings)
    click.echo(f"wa-outbox: schema at {_schema_at(settings)}")


@db.command("downgrade", context_settings={"ignore_unknown_options": True})
@click.argument("revision")
def db_downgrade(revision: str) -> None:
    """Revert migrations down to REVISION: a revision id, `-1` (one step) or `base` (removes every wa-outbox
    object)."""
    from .. import migrate
    settings = _settings()
    migrate.downgrade(settings.required("database_url"), revision, prepared_statements=settings.db_prepared_statements)
    at = _schema_at(settings)
    if at == "base":  # nothing of wa-outbox's is left but alembic's empty version table and the schema: drop them
        from .. import queries
        from ..db import connect
        with connect(settings, autocommit=True) as conn:
            queries.drop_empty_schema(conn)
    click.echo(f"wa-outbox: schema at {at}")


def _schema_at(settings: Settings) -> str:
    """The applied revision, or `base` when none is (the schema is gone)."""
    import psycopg

    from .. import queries
    from ..db import connect
    with connect(settings, autocommit=True) as conn:
        try:
            version = queries.schema_version(conn)
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return "base"
    if version is None:
        return "base"
    from .. import migrate
    return f"head ({version})" if version == migrate.head() else version


@db.command("current")
def db_current() -> None:
    """Show the applied revision."""
    from .. import migrate
    settings = _settings()
    migrate.current(settings.required("database_url"), prepared_statements=settings.db_prepared_statements)


db.add_command(db_query)
db.add_command(db_support_role)
