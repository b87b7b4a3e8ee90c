"""`wa-outbox db`: schema migrations (alembic) and the SQL console."""

from __future__ import annotations

import json as _json

import click

from ..config import Settings
from ._common import _record_default_sender, _settings
from ._errors import CliError
from ._output import _JSON_TYPE_OIDS, _cell, _json_default, _tsv


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
    migrate.upgrade(settings.database_url, revision or revision_option or "head",
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
    migrate.downgrade(settings.database_url, revision, prepared_statements=settings.db_prepared_statements)
    at = _schema_at(settings)
    if at == "base":  # nothing of wa-outbox's is left but alembic's empty version table and the schema: drop them
        from ..db import connect, query
        with connect(settings, autocommit=True) as conn:
            conn.execute(query("drop_empty_schema"))
    click.echo(f"wa-outbox: schema at {at}")


def _schema_at(settings: Settings) -> str:
    """The applied revision, or `base` when none is (the schema is gone)."""
    import psycopg
    from ..db import connect, query
    with connect(settings, autocommit=True) as conn:
        try:
            row = conn.execute(query("schema_version")).fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return "base"
    if not row:
        return "base"
    from .. import migrate
    return f"head ({row[0]})" if row[0] == migrate.head() else row[0]


@db.command("current")
def db_current() -> None:
    """Show the applied revision."""
    from .. import migrate
    settings = _settings()
    migrate.current(settings.database_url, prepared_statements=settings.db_prepared_statements)


@db.command("query")
@click.argument("sql")
@click.option("--write", is_flag=True, help="Allow writes (default: a read-only transaction Postgres enforces).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row instead of tab-separated columns.")
def db_query(sql: str, write: bool, as_json: bool) -> None:
    """Run exactly one SQL statement and print its rows: tab-separated with a header line, or `--json`. Read-only
    unless `--write` (then it runs in its own transaction, committed)."""
    import psycopg
    from ..db import connect
    # Read-only: a READ ONLY transaction, so Postgres itself refuses writes. --write: autocommit, so statements that
    # cannot run in a transaction block (VACUUM, CREATE INDEX CONCURRENTLY) work too.
    with connect(_settings(), autocommit=write, application_name="wa-outbox-cli") as conn:
        conn.read_only = not write
        with conn.cursor() as cursor:
            try:
                # A pipeline: the extended query protocol (which Postgres refuses for several statements) with an
                # unnamed statement, so nothing stays prepared on the server (PgBouncer). bytes: run as written, no
                # placeholder parsing.
                with conn.pipeline():
                    cursor.execute(sql.encode())
            except psycopg.errors.SyntaxError as exc:
                if "multiple commands" in str(exc):
                    raise CliError("db query runs exactly one statement; this SQL has several: run them one by one"
                                   ) from None
                raise
            if not cursor.description:
                click.echo(cursor.statusmessage or "", err=True)
                return
            names = [c.name for c in cursor.description]
            json_columns = {i for i, c in enumerate(cursor.description) if c.type_code in _JSON_TYPE_OIDS}
            if not as_json:
                click.echo(_tsv(names))
            for row in cursor:
                if as_json:
                    click.echo(_json.dumps(dict(zip(names, row)), default=_json_default, ensure_ascii=False))
                else:
                    click.echo(_tsv(_cell(v, i in json_columns) for i, v in enumerate(row)))


