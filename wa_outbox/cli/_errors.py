"""Errors as one line: database failures described without their password, and the `wa-outbox` group class that
turns every command's failure into `wa-outbox: …` on stderr and a non-zero exit."""

from __future__ import annotations

import os
import sys

import click

from ..config import ConfigError, redact_url, scrub


class ConfigurationError(click.ClickException):
    """A ConfigError: `wa-outbox: configuration error: …` in one line, exit status 2, as gunicorn_conf and the WSGI
    entry point exit on one (the platform tells a bad setting from a failure by it)."""
    exit_code = 2

    def __init__(self, error: ConfigError) -> None:
        super().__init__(f"configuration error: {error}")


class CliError(click.ClickException):
    """A failure shown as one line `wa-outbox: …` on stderr, exit status 1 (or `exit_code`)."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        # click's stubs declare exit_code a ClassVar, yet click reads it from the instance: one code per failure.
        self.exit_code = exit_code  # type: ignore[misc]

    def show(self, file=None) -> None:
        click.echo(f"wa-outbox: {self.format_message()}", file=file, err=file is None)


def describe_database_error(exc: BaseException) -> str:
    """One line naming what went wrong with the database, without its password: unreachable, not migrated, or
    Postgres's own first line. `exc` is a psycopg, SQLAlchemy or alembic error (SQLAlchemy wraps psycopg's)."""
    import psycopg
    cause: BaseException = exc
    while not isinstance(cause, psycopg.Error):
        inner = getattr(cause, "orig", None) or cause.__cause__
        if inner is None:
            break
        cause = inner
    lines = str(cause).strip().splitlines()
    first = lines[0] if lines else type(cause).__name__
    url = os.environ.get("DATABASE_URL")
    if isinstance(cause, psycopg.OperationalError) and _is_connection_failure(cause):
        where = f" at {redact_url(url)}" if url else ""
        text = f"cannot reach the database{where}: {first}"
    elif isinstance(cause, (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName,
                            psycopg.errors.UndefinedFunction)) and "wa_outbox" in first:
        text = f"the database is not migrated ({first}): run `wa-outbox db upgrade`"
    elif isinstance(cause, psycopg.Error):
        text = f"database error: {first}"
    else:
        text = first
    if url:
        from ..config import normalize_database_url
        try:
            text = scrub(text, normalize_database_url(url))
        except ValueError:
            pass
        text = scrub(text, url)
    return text


def _is_connection_failure(error) -> bool:
    """No SQLSTATE (libpq could not connect or lost the connection), class 08, or the server shutting down."""
    return error.sqlstate is None or error.sqlstate.startswith("08") or error.sqlstate in {"57P01", "57P02", "57P03"}


class _Main(click.Group):
    """The `wa-outbox` group. Every command's database failures (psycopg, SQLAlchemy, alembic) and its own errors end
    here as one line on stderr and a non-zero exit, never a traceback (the release phase's log stays readable)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.UsageError, CliError, click.exceptions.Exit, click.Abort):
            raise
        except click.ClickException as exc:
            # A command that turned a database error into its own message: describe the original the same way.
            context = exc.__context__
            raise CliError(describe_database_error(context) if context is not None and _is_database_error(context)
                           else exc.format_message(), exit_code=exc.exit_code) from None
        except Exception as exc:
            if _is_database_error(exc):
                raise CliError(describe_database_error(exc)) from None
            raise


def _is_database_error(exc: BaseException | None) -> bool:
    """A psycopg, SQLAlchemy or alembic error (checked without importing what the command did not load)."""
    if exc is None:
        return False
    kinds = [getattr(sys.modules.get(module), name, None) for module, name in (
        ("psycopg", "Error"), ("sqlalchemy.exc", "SQLAlchemyError"), ("alembic.util", "CommandError"))]
    return isinstance(exc, tuple(kind for kind in kinds if isinstance(kind, type)))


