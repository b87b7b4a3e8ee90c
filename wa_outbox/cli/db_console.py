"""`wa-outbox db query` (the SQL console) and `wa-outbox db support-role` (a least-privilege role to run it as)."""

from __future__ import annotations

import json as _json
import sys

import click

from ._common import _settings
from ._errors import CliError
from ._output import _JSON_TYPE_OIDS, _cell, _json_default, _tsv

READ_ONLY_ONLY = ("--statement-timeout", "--lock-timeout", "--as-role")


@click.command("query")
@click.argument("sql")
@click.option("--write", is_flag=True, help="Allow writes: the statement runs as written, committed at once "
                                            "(default: one read-only statement, checked before it runs).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row instead of tab-separated columns.")
@click.option("--statement-timeout", type=click.FloatRange(min=0, min_open=True), default=30, show_default=True,
              metavar="SECONDS", help="Read-only: cancel the statement after this long.")
@click.option("--lock-timeout", type=click.FloatRange(min=0, min_open=True), default=2, show_default=True,
              metavar="SECONDS", help="Read-only: give up waiting for a lock after this long.")
@click.option("--as-role", metavar="ROLE", help="Read-only: run as this role (SET ROLE inside the transaction), e.g. "
                                                "one made by `wa-outbox db support-role`.")
@click.pass_context
def db_query(ctx: click.Context, sql: str, write: bool, as_json: bool, statement_timeout: float,
             lock_timeout: float, as_role: str | None) -> None:
    """Run exactly one SQL statement and print its rows: tab-separated with a header line, or `--json`.

    Without `--write`, only a SELECT, VALUES, TABLE, SHOW, or EXPLAIN without ANALYZE of one is run, with no FOR
    UPDATE/SHARE, SELECT INTO or data-modifying WITH, and no VOLATILE function (lo_from_bytea, pg_terminate_backend,
    set_config, nextval, …) but a few harmless ones (random, clock_timestamp, pg_relation_size, …); in a READ ONLY
    transaction with a statement and a lock timeout. Anything else is refused before it runs. With `--write` it runs
    in its own transaction, committed."""
    import psycopg

    from .. import queries
    from ..db import connect
    from . import _readonly
    if write:
        given = [name for name in READ_ONLY_ONLY
                 if ctx.get_parameter_source(name[2:].replace("-", "_")) == click.core.ParameterSource.COMMANDLINE]
        if given:
            raise click.UsageError(f"{', '.join(given)}: for read-only queries, not with --write")
    try:
        inspected = _readonly.inspect(sql)
    except _readonly.SeveralStatements as exc:
        raise CliError(str(exc)) from None
    except _readonly.Refused as exc:
        if not write:
            raise CliError(f"refused, nothing was run: {exc}") from None
        inspected = None  # --write: anything goes (Postgres decides)
    settings = _settings()
    if write:
        click.echo("wa-outbox: --write: the statement runs with writes allowed, committed at once", err=True)
    # Read-only: a READ ONLY transaction, rolled back. --write: autocommit, so statements that cannot run in a
    # transaction block (VACUUM, CREATE INDEX CONCURRENTLY) work too.
    with connect(settings, autocommit=write, application_name="wa-outbox-cli") as conn:
        conn.read_only = not write
        _print_infinite_dates(conn)
        with conn.cursor() as cursor:
            if inspected is not None and not write:
                # Both in this connection's READ ONLY transaction, before the statement.
                queries.console_begin(conn, statement_timeout=f"{statement_timeout * 1000:.0f}ms",
                                      lock_timeout=f"{lock_timeout * 1000:.0f}ms", role=as_role)
                functions, operators = sorted(inspected.functions), sorted(inspected.operators)
                volatile = queries.console_volatile_calls(
                    conn, function_schemas=[s for s, _ in functions], function_names=[n for _, n in functions],
                    operator_schemas=[s for s, _ in operators], operator_names=[n for _, n in operators])
                refusal = _readonly.volatile_refusal((v.kind, v.schema, v.name) for v in volatile)
                if refusal:
                    raise CliError(f"refused, nothing was run: {refusal}")
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
            except psycopg.errors.QueryCanceled as exc:
                if "statement timeout" not in str(exc):
                    raise
                raise CliError(f"cancelled after --statement-timeout ({statement_timeout:g} s)") from None
            except psycopg.errors.LockNotAvailable:
                raise CliError(f"a lock it needs was not granted within --lock-timeout ({lock_timeout:g} s)"
                               ) from None
            if not cursor.description:
                click.echo(cursor.statusmessage or "", err=True)
                return
            names = [c.name for c in cursor.description]
            json_columns = {i for i, c in enumerate(cursor.description) if c.type_code in _JSON_TYPE_OIDS}
            if not as_json:
                click.echo(_tsv(names))
            for row in cursor:
                if as_json:
                    click.echo(_json.dumps(dict(zip(names, row, strict=True)), default=_json_default,
                                           ensure_ascii=False))
                else:
                    click.echo(_tsv(_cell(v, i in json_columns) for i, v in enumerate(row)))
        if not write:
            conn.rollback()


def _print_infinite_dates(conn) -> None:
    """Load the dates and timestamps `infinity` and `-infinity` (a message its template holds is due at 'infinity')
    as those words, as psql prints them: Python's datetime has no such value, and the row would fail to print."""
    from psycopg.types import datetime as dt

    for name, base in (("date", dt.DateLoader), ("timestamp", dt.TimestampLoader),
                       ("timestamptz", dt.TimestamptzLoader)):
        class Infinite(base):  # type: ignore[valid-type,misc]
            def load(self, data):
                text = bytes(data)
                if text in (b"infinity", b"-infinity"):
                    return text.decode()
                return super().load(data)
        conn.adapters.register_loader(name, Infinite)


@click.command("support-role")
@click.argument("name")
@click.option("--password-stdin", is_flag=True,
              help="Make it a LOGIN role with the password read from stdin (its first line), sent to Postgres "
                   "already SCRAM-hashed. Without it, a new role is NOLOGIN (for `db query --as-role NAME`) and an "
                   "existing one keeps its login and password.")
def db_support_role(name: str, password_stdin: bool) -> None:
    """Create (or bring up to date) role NAME for support: USAGE on schema wa_outbox and SELECT on its views
    (notification_timeline, queue_health, …) only, no access to its tables; by default read-only sessions with a
    30 s statement and a 2 s lock timeout when it logs in. Safe to repeat."""
    from psycopg import sql as q

    from .. import queries
    from ..db import connect
    if not name or len(name.encode()) > 63 or "\x00" in name:
        raise click.BadParameter("a role name of 1 to 63 bytes", param_hint="NAME")
    password = None
    if password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
        if not password:
            raise click.BadParameter("no password on stdin", param_hint="--password-stdin")
    role = q.Identifier(name)
    # DDL names its role as an identifier, which no placeholder can stand for: composed with psycopg.sql (quoted).
    with connect(_settings(), application_name="wa-outbox-cli") as conn:
        state = queries.support_role_state(conn, name=name)
        exists, views = state.exists, state.views
        if state.is_me or state.privileged:
            raise CliError(f"role {name} is {'the role running this' if state.is_me else 'privileged'}: "
                           "not made a support role (choose another name)")
        if not exists:
            conn.execute(q.SQL("CREATE ROLE {} NOLOGIN NOINHERIT").format(role))
        if password is not None:
            hashed = conn.pgconn.encrypt_password(password.encode(), name.encode(), None).decode()
            conn.execute(q.SQL("ALTER ROLE {} LOGIN PASSWORD {}").format(role, q.Literal(hashed)))
        # When it logs in itself (psql): read-only sessions that cannot hold locks or run long.
        for setting, value in (("default_transaction_read_only", "on"), ("statement_timeout", "30s"),
                               ("lock_timeout", "2s")):
            conn.execute(q.SQL("ALTER ROLE {} SET {} = {}").format(role, q.Identifier(setting), q.Literal(value)))
        conn.execute(q.SQL("GRANT USAGE ON SCHEMA wa_outbox TO {}").format(role))
        # Whatever it was granted before on the schema's tables and sequences goes; then the views alone.
        conn.execute(q.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA wa_outbox FROM {}").format(role))
        conn.execute(q.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA wa_outbox FROM {}").format(role))
        for view in views:
            conn.execute(q.SQL("GRANT SELECT ON {} TO {}").format(q.Identifier("wa_outbox", view), role))
        if not state.i_am_superuser and not state.i_am_member:  # so that `db query --as-role` may SET ROLE to it
            conn.execute(q.SQL("GRANT {} TO CURRENT_USER").format(role))
    login = "LOGIN, password set" if password is not None else "existing login kept" if exists else "NOLOGIN"
    click.echo(f"wa-outbox: role {name} ({'updated' if exists else 'created'}, {login}): USAGE on schema wa_outbox, "
               f"SELECT on {', '.join(f'wa_outbox.{v}' for v in views) or 'no views'}; no table access")
