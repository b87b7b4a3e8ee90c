"""The `wa-outbox` command line.

Every command reads the same environment as the services. Without DATABASE_URL the commands start (or reuse) the
embedded Postgres in ./.wa-outbox/ (WA_OUTBOX_DATA_DIR), so a laptop needs nothing installed.
"""

from __future__ import annotations

import json as _json
import os
import signal
import subprocess
import sys
import threading
import time

import click

from . import __version__, logs
from .config import ConfigError, Settings, redact_url, scrub
from .db import with_database

# Local-only values `wa-outbox dev` uses for whatever is unset: never for production.
DEV_DEFAULTS = {
    "WHATSAPP_APP_SECRET": "dev-app-secret",
    "WHATSAPP_VERIFY_TOKEN": "dev-verify-token",
    "WHATSAPP_ACCESS_TOKEN": "dev-access-token",
    "WHATSAPP_PHONE_NUMBER_ID": "100000000000001",
    "WA_OUTBOX_API_TOKENS": "dev-api-token-0123456789",
}


class ConfigurationError(click.ClickException):
    """A ConfigError: `wa-outbox: configuration error: …` in one line, exit status 2, as gunicorn_conf and the WSGI
    entry point exit on one (the platform tells a bad setting from a failure by it)."""
    exit_code = 2

    def __init__(self, error: ConfigError) -> None:
        super().__init__(f"configuration error: {error}")


def _settings(*, service: bool = False) -> Settings:
    """The settings from the environment, with a database; logging configured: to stdout for a service (web, worker:
    the platform collects stdout), to stderr for every other command (its results alone go to stdout)."""
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    logs.configure(settings.log_level, settings.log_format, sys.stdout if service else sys.stderr)
    try:
        return with_database(settings)
    except ConfigError as exc:
        raise ConfigurationError(exc) from None


class CliError(click.ClickException):
    """A failure shown as one line `wa-outbox: …` on stderr, exit status 1."""

    def show(self, file=None) -> None:
        click.echo(f"wa-outbox: {self.format_message()}", file=file, err=file is None)


def describe_database_error(exc: BaseException) -> str:
    """One line naming what went wrong with the database, without its password: unreachable, not migrated, or
    Postgres's own first line. `exc` is a psycopg, SQLAlchemy or alembic error (SQLAlchemy wraps psycopg's)."""
    import psycopg
    cause: BaseException = exc
    while not isinstance(cause, psycopg.Error) and (getattr(cause, "orig", None) or cause.__cause__):
        cause = getattr(cause, "orig", None) or cause.__cause__
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
        from .config import normalize_database_url
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
            error = CliError(describe_database_error(exc.__context__) if _is_database_error(exc.__context__)
                             else exc.format_message())
            error.exit_code = exc.exit_code
            raise error from None
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


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", "-V", prog_name="wa-outbox", message="%(prog)s %(version)s")
def main() -> None:
    """wa-outbox: reliable WhatsApp Cloud API messaging with Postgres as the only moving part."""


# --- database -------------------------------------------------------------------------------------------------------

@main.group()
def db() -> None:
    """Schema migrations (alembic)."""


@db.command("upgrade")
@click.argument("revision", required=False)
@click.option("--revision", "revision_option", hidden=True, help="The same as REVISION (older spelling).")
def db_upgrade(revision: str | None, revision_option: str | None) -> None:
    """Apply migrations up to REVISION (default `head`; `+1` one step) — the Procfile's release phase."""
    from . import migrate
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
    from . import migrate
    settings = _settings()
    migrate.downgrade(settings.database_url, revision, prepared_statements=settings.db_prepared_statements)
    at = _schema_at(settings)
    if at == "base":  # nothing of wa-outbox's is left but alembic's empty version table and the schema: drop them
        from .db import connect, query
        with connect(settings, autocommit=True) as conn:
            conn.execute(query("drop_empty_schema"))
    click.echo(f"wa-outbox: schema at {at}")


def _schema_at(settings: Settings) -> str:
    """The applied revision, or `base` when none is (the schema is gone)."""
    import psycopg
    from .db import connect, query
    with connect(settings, autocommit=True) as conn:
        try:
            row = conn.execute(query("schema_version")).fetchone()
        except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
            return "base"
    if not row:
        return "base"
    from . import migrate
    return f"head ({row[0]})" if row[0] == migrate.head() else row[0]


@db.command("current")
def db_current() -> None:
    """Show the applied revision."""
    from . import migrate
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
    from .db import connect
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


_JSON_TYPE_OIDS = {114, 3802, 199, 3807}  # json, jsonb, json[], jsonb[]

# Backslash, tab, newline and carriage return in a value, escaped as PostgreSQL's COPY text format (and
# mysql --batch) does: a value never splits a column or a line.
_TSV_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def _tsv(cells) -> str:
    """One line of tab-separated output, each cell escaped (_TSV_ESCAPES): every TSV line the CLI prints is made
    here."""
    return "\t".join(str(cell).translate(_TSV_ESCAPES) for cell in cells)


def _cell(value, is_json: bool) -> str:
    """A value for tab-separated output: JSON for json/jsonb (and arrays), never a Python repr; NULL is empty."""
    if value is None:
        return ""
    if is_json or isinstance(value, (dict, list)):
        return _json.dumps(value, default=_json_default, ensure_ascii=False)
    return str(value)


def _json_default(value):
    import datetime
    import decimal
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, memoryview)):
        return "\\x" + bytes(value).hex()
    return str(value)


def _record_default_sender(settings: Settings) -> None:
    """Tell SQL-side enqueue() which sender to use when the caller names none."""
    if not settings.phone_number_id:
        return
    from .db import connect, query
    with connect(settings, autocommit=True) as conn:
        conn.execute(query("record_default_sender"), {"phone_number_id": settings.phone_number_id})


# --- processes ------------------------------------------------------------------------------------------------------

@main.command()
@click.option("--port", type=int, help="Port to listen on (default $PORT or 8000).")
def web(port: int | None) -> None:
    """Serve the web app with gunicorn (webhooks, /v1 API, health, metrics)."""
    settings = _settings(service=True)
    if port:
        os.environ["PORT"] = str(port)
    try:
        settings.require_web()
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    sys.exit(_run_children({"web": _gunicorn_command()}))


@main.command()
def worker() -> None:
    """Deliver queued messages and process stored webhooks until SIGTERM (then drain within the grace).

    A database that cannot be reached, or is not migrated yet (the release phase still running), is waited for with
    capped exponential backoff, one log line per attempt; SIGTERM or SIGINT while waiting exits 0 at once."""
    from .worker import Worker, wait_until_ready
    settings = _settings(service=True)
    try:
        settings.require_worker()
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    stopping = threading.Event()
    running: list[Worker] = []

    def _stop(signum, frame):
        stopping.set()
        for started in running:
            started.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if not wait_until_ready(settings, stopping, prepare=lambda: _record_default_sender(settings)):
        return
    try:
        the_worker = Worker(settings)
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    running.append(the_worker)
    if stopping.is_set():
        return
    the_worker.run()


@main.command()
@click.option("--port", type=int, default=8000, show_default=True, help="Port of the web app.")
@click.option("--simulator-port", type=int, default=9000, show_default=True, help="Port of the Graph API simulator.")
@click.option("--status-delay-ms", type=click.FloatRange(min=0), default=200, show_default=True,
              help="Simulator: sent after N ms, delivered after 2N, read after 3N.")
def dev(port: int, simulator_port: int, status_delay_ms: float) -> None:
    """Everything on this machine: Postgres, migrations, web app, worker, and the Graph API simulator in place of
    Meta (unless WHATSAPP_API_BASE_URL is set), wired together. Ctrl-C stops it all."""
    for name, value in DEV_DEFAULTS.items():
        os.environ.setdefault(name, value)
    os.environ["PORT"] = str(port)
    os.environ["WA_OUTBOX_BIND"] = f"127.0.0.1:{port}"
    os.environ.setdefault("WA_OUTBOX_POLL_INTERVAL", "0.5")
    os.environ.setdefault("WA_OUTBOX_SHUTDOWN_GRACE", "3")  # Ctrl-C stops everything within a few seconds
    # One readable line per event, prefixed per process (the children write to a pipe: tell them it is for people).
    os.environ.setdefault("LOG_FORMAT", "console")
    os.environ["PYTHONUNBUFFERED"] = "1"
    simulate = "WHATSAPP_API_BASE_URL" not in os.environ
    sim_url = f"http://127.0.0.1:{simulator_port}"
    if simulate:
        os.environ["WHATSAPP_API_BASE_URL"] = f"{sim_url}/v23.0"
    settings = _settings()
    from . import migrate
    migrate.upgrade(settings.database_url, prepared_statements=settings.db_prepared_statements)
    _record_default_sender(settings)

    web_url = f"http://127.0.0.1:{port}"
    children = {"web": _gunicorn_command(), "worker": [sys.executable, "-m", "wa_outbox.cli", "worker"]}
    if simulate:
        children["sim"] = [sys.executable, "-m", "wa_outbox.cli", "simulator", "--port", str(simulator_port),
                                 "--webhook-url", f"{web_url}/webhooks/whatsapp",
                                 "--status-delay-ms", str(status_delay_ms)]
    token = settings.api_tokens[0]
    auth = f"-H 'Authorization: Bearer {token}'"
    click.echo(f"wa-outbox dev: postgres   {redact_url(settings.database_url)}")
    click.echo(f"wa-outbox dev: web        {web_url}  (webhooks {web_url}/webhooks/whatsapp, "
               f"metrics {web_url}/metrics, API token {token})")
    click.echo(f"wa-outbox dev: worker     sending to {settings.api_base_url}")
    if simulate:
        click.echo(f"wa-outbox dev: simulator  {sim_url}/v23.0  (admin {sim_url}/_admin/: faults, messages, inbound)")
    click.echo("wa-outbox dev: try it — enqueue a message, then show its timeline a second later:")
    click.echo(f"  ID=$(curl -s {auth} -H 'Content-Type: application/json' -d "
               f"'{{\"to\": \"+5511987654321\", \"message\": {{\"type\": \"text\", \"text\": {{\"body\": "
               f"\"Hello from wa-outbox\"}}}}}}' {web_url}/v1/messages | sed 's/.*\"id\": *\\([0-9]*\\).*/\\1/'); "
               f"sleep 1; curl -s {auth} {web_url}/v1/messages/$ID")
    if simulate:
        click.echo("wa-outbox dev: make Meta misbehave (30% transient errors, 20% lost responses, and +5511900000003 "
                   "undeliverable: a dead letter):")
        click.echo(f"  curl -s -X PUT {sim_url}/_admin/faults -H 'Content-Type: application/json' -d "
                   f"'[{{\"mode\": \"error\", \"code\": 131026, \"match\": {{\"to\": \"5511900000003\"}}}}, "
                   f"{{\"mode\": \"error\", \"code\": 131000, \"rate\": 0.3}}, "
                   f"{{\"mode\": \"lost_response\", \"rate\": 0.2}}]'")
    click.echo("wa-outbox dev: Ctrl-C stops everything")
    sys.stdout.flush()
    sys.exit(_run_children(children, grace=5.0, stop_signal=signal.SIGINT, prefixed=True))


# --- operators: send, status, dead-letter queue, rate limits, retention ------------------------------------------------

def _engine(settings: Settings):
    from .db import create_engine
    return create_engine(settings.database_url, pool_size=1, application_name="wa-outbox-cli",
                         isolation_level="AUTOCOMMIT", prepared_statements=settings.db_prepared_statements)


@main.command()
@click.option("--to", "to", required=True, help="Recipient, E.164 (+5511987654321).")
@click.option("--text", help="Text body.")
@click.option("--template", help="Template name (with --lang).")
@click.option("--lang", default="en_US", show_default=True, help="Template language code.")
@click.option("--json", "message_json", help="Any Cloud API message body, as JSON.")
@click.option("--idempotency-key", help="Same key, same message: queued once.")
@click.option("--correlation-id", help="Stored on the message and its timeline.")
@click.option("--phone-number-id", help="Sender (default: WHATSAPP_PHONE_NUMBER_ID).")
def send(to, text, template, lang, message_json, idempotency_key, correlation_id, phone_number_id) -> None:
    """Queue one message (the worker sends it) and print its id."""
    import json as _json
    import psycopg
    from . import outbox
    from .messages import InvalidMessage
    given = [x for x in (text, template, message_json) if x is not None]
    if len(given) != 1:
        raise click.UsageError("give exactly one of --text, --template or --json")
    if text is not None:
        message = {"type": "text", "text": {"body": text}}
    elif template is not None:
        message = {"type": "template", "template": {"name": template, "language": {"code": lang}}}
    else:
        try:
            message = _json.loads(message_json)
        except ValueError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--json") from None
    settings = _settings()
    try:  # validated first (InvalidMessage), then one statement, safe to repeat (outbox.enqueue)
        notification_id, status, created = outbox.enqueue(
            _engine(settings), to=to, message=message, idempotency_key=idempotency_key,
            correlation_id=correlation_id, phone_number_id=phone_number_id or settings.phone_number_id)
    except InvalidMessage as exc:
        raise click.ClickException(str(exc)) from None
    except psycopg.Error as exc:
        raise click.ClickException(str(exc).strip().splitlines()[0]) from None
    click.echo(_tsv([notification_id, status] + ([] if created else ["(idempotency key seen before)"])))


@main.command()
@click.argument("term")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per message (with its timeline when found "
                                                      "by id) instead of text.")
def status(term: str, as_json: bool) -> None:
    """Was it sent? TERM is a message id, a phone number or a correlation id."""
    from . import outbox
    engine = _engine(_settings())
    shown = False
    found = outbox.get(engine, int(term)) if term.isdigit() and len(term) < 19 else None
    matches = [m for m in outbox.find(engine, term) if not found or m["id"] != found["id"]]
    if as_json:
        for row in ([found] if found else []) + matches:
            _echo_json(row)
        if not found and not matches:
            raise click.ClickException(f"no message matches {term!r} (an id, a phone number or a correlation id)")
        return
    if found:
        _print_notification(found)
        shown = True
    if matches:
        if shown:
            click.echo("")
        click.echo(_tsv(["id", "status", "recipient", "attempts", "created_at", "correlation_id", "last_error"]))
        for m in matches:
            click.echo(_tsv([m["id"], m["status"], f"+{m['recipient']}", m["attempts"],
                             f"{m['created_at']:%Y-%m-%d %H:%M:%S}", m["correlation_id"] or "",
                             m["last_error"] or ""]))
        shown = True
    if not shown:
        raise click.ClickException(f"no message matches {term!r} (an id, a phone number or a correlation id)")


def _echo_json(row: dict) -> None:
    """One result as one line of JSON on stdout (`--json`)."""
    click.echo(_json.dumps(row, default=_json_default, ensure_ascii=False))


def _print_notification(n: dict) -> None:
    import json as _json
    click.echo(f"message {n['id']}: {n['status']} (attempt {n['attempts']}"
               + (f"/{n['max_attempts']})" if n["max_attempts"] else ")"))
    click.echo(f"  to +{n['recipient']} from {n['phone_number_id']}, wamid {n['wamid'] or '-'}, "
               f"correlation id {n['correlation_id'] or '-'}")
    if n["last_error"]:
        click.echo(f"  last error: {n['last_error'].get('message')}")
    for e in n["timeline"]:
        detail = {k: v for k, v in (e.get("detail") or {}).items() if v is not None}
        click.echo(f"  {e['at'][:23]}  {e['event']:<16} attempt {e['attempt']}  "
                   f"{_json.dumps(detail, ensure_ascii=False) if detail else ''}")


@main.group()
def dlq() -> None:
    """The dead-letter queue: messages that could not be sent (dead) or that Meta reported failed, with reasons."""


@dlq.command("list")
@click.option("--limit", default=50, show_default=True, type=click.IntRange(1, 500))
@click.option("--code", type=int, help="Only this Graph error code.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per dead message instead of a table.")
def dlq_list(limit: int, code: int | None, as_json: bool) -> None:
    """List dead messages, newest first, with their reasons."""
    from . import outbox
    rows = outbox.list_dead(_engine(_settings()), limit=limit, code=code)
    if as_json:
        for r in rows:
            _echo_json(r)
        click.echo(f"({len(rows)} shown)", err=True)
        return
    # status: dead (given up here) or failed (Meta accepted it, then reported it failed: its code and title).
    click.echo(_tsv(["id", "status", "recipient", "attempts", "died_at", "reason"]))
    for r in rows:
        click.echo(_tsv([r["id"], r["status"], f"+{r['recipient']}", r["attempts"], f"{r['died_at']:%Y-%m-%d %H:%M:%S}",
                         (r["last_error"] or {}).get("message", "")]))
    click.echo(f"({len(rows)} shown)", err=True)


@dlq.command("show")
@click.argument("notification_id", type=int)
@click.option("--json", "as_json", is_flag=True, help="The message and its timeline as one JSON object.")
def dlq_show(notification_id: int, as_json: bool) -> None:
    """Show one message (dead or not) with its last error and whole timeline."""
    from . import outbox
    found = outbox.get(_engine(_settings()), notification_id)
    if not found:
        raise click.ClickException(f"no message {notification_id}")
    if as_json:
        _echo_json(found)
    else:
        _print_notification(found)


@dlq.command("retry")
@click.argument("ids", nargs=-1, type=int)
@click.option("--all", "all_dead", is_flag=True, help="Every dead or failed message (narrow with --code/--to).")
@click.option("--code", type=int, help="With --all: only this Graph error code.")
@click.option("--to", "recipient", help="With --all: only this recipient.")
def dlq_retry(ids, all_dead, code, recipient) -> None:
    """Requeue dead or failed messages: attempts start over; the timeline records it."""
    from . import outbox
    from .messages import normalize_recipient
    if bool(ids) == all_dead:
        raise click.UsageError("give message ids, or --all")
    if (code or recipient) and not all_dead:
        raise click.UsageError("--code and --to narrow --all")
    requeued = outbox.requeue(_engine(_settings()), ids=list(ids), all_dead=all_dead, code=code,
                              recipient=normalize_recipient(recipient) if recipient else None, actor="cli")
    click.echo(f"requeued {len(requeued)}")
    missing = sorted(set(ids) - set(requeued))
    if missing:
        raise click.ClickException(f"not dead or failed, or not found: {' '.join(map(str, missing))}")


@dlq.command("purge")
@click.argument("ids", nargs=-1, type=int)
@click.option("--all", "all_dead", is_flag=True, help="Every dead message.")
@click.option("--older-than-days", default=0, show_default=True, type=click.IntRange(0))
@click.option("--yes", is_flag=True, help="Do not ask.")
def dlq_purge(ids, all_dead, older_than_days, yes) -> None:
    """Delete dead messages and their timelines, explicitly."""
    from . import outbox
    if bool(ids) == all_dead:
        raise click.UsageError("give message ids, or --all")
    if all_dead and not yes:
        click.confirm("Delete every dead message" + (f" older than {older_than_days} days" if older_than_days
                                                     else "") + "?", abort=True)
    engine = _engine(_settings())
    dead_before = {i for i in set(ids) if (row := outbox.get(engine, i)) and row["status"] == "dead"}
    purged = outbox.purge_dead(engine, ids=list(ids), all_dead=all_dead, older_than_days=older_than_days)
    click.echo(f"purged {purged}")
    # As for retry: an id that was not purged (not found, not dead, or too recent) is an error (exit status 1).
    left = (set(ids) - dead_before) | {i for i in dead_before if outbox.get(engine, i)}
    if left:
        raise click.ClickException(f"not dead, too recent, or not found: {' '.join(map(str, sorted(left)))}")


@main.group()
def ratelimit() -> None:
    """Per-sender rates, shared by every worker."""


@ratelimit.command("show")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per sender instead of a table.")
def ratelimit_show(as_json: bool) -> None:
    """Every sender's rate, burst, tokens and pause."""
    from . import outbox
    rows = outbox.ratelimits(_engine(_settings()))
    if as_json:
        for r in rows:
            _echo_json(r)
        return
    # burst "default": the default pacing (never more than mps in any one-second window); refill and capacity are
    # the bucket that makes.
    click.echo(_tsv(["phone_number_id", "mps", "burst", "refill", "capacity", "tokens", "paused_until",
                     "pause_reason"]))
    for r in rows:
        burst = "default" if r["burst"] is None else f"{r['burst']:g}"
        click.echo(_tsv([r["phone_number_id"], f"{r['mps']:g}", burst, f"{r['refill']:.4g}", f"{r['capacity']:.4g}",
                         r["tokens"], r["paused_until"] or "", r["pause_reason"] or ""]))


@ratelimit.command("set")
@click.argument("phone_number_id")
@click.option("--mps", type=click.FloatRange(min=0.01), required=True, help="Messages per second.")
@click.option("--burst", type=click.FloatRange(min=1),
              help="A classic token bucket of this size: a one-second window may then see up to burst + mps sends. "
                   "Default: paced so that no one-second window ever sees more than --mps.")
@click.option("--resume", is_flag=True, help="Also lift a pause now (see also: ratelimit resume).")
def ratelimit_set(phone_number_id, mps, burst, resume) -> None:
    """Set a sender's rate, shared by every worker."""
    from . import outbox
    _check_phone_number_id(phone_number_id)
    engine = _engine(_settings())
    if resume:  # as `ratelimit resume`: the messages the pause deferred are due now too
        outbox.resume_sender(engine, phone_number_id)
    r = outbox.set_ratelimit(engine, phone_number_id, mps, burst, resume)
    click.echo(f"{r['phone_number_id']}: {r['mps']:g} messages/s, "
               + ("paced (never more than that in any second)" if r["burst"] is None else f"burst {r['burst']:g}")
               + (f", paused until {r['paused_until']}" if r["paused_until"] else ""))


def _check_phone_number_id(phone_number_id: str) -> None:
    from .messages import InvalidMessage, validate_phone_number_id
    try:
        validate_phone_number_id(phone_number_id)
    except InvalidMessage as exc:
        raise click.BadParameter(str(exc), param_hint="PHONE_NUMBER_ID") from None


@ratelimit.command("resume")
@click.argument("phone_number_id")
def ratelimit_resume(phone_number_id) -> None:
    """Lift a sender's pause now; the messages the pause deferred are due at once."""
    from . import outbox
    _check_phone_number_id(phone_number_id)
    r = outbox.resume_sender(_engine(_settings()), phone_number_id)
    if r["was_paused_until"] is None:
        click.echo(f"{phone_number_id}: not paused; {r['moved']} messages moved")
    else:
        click.echo(f"{phone_number_id}: resumed (was paused until {r['was_paused_until']}: {r['pause_reason']}); "
                   f"{r['moved']} deferred messages due now")


@main.command()
@click.argument("ids", nargs=-1, type=click.IntRange(1, 2 ** 63 - 1), required=True)
def cancel(ids) -> None:
    """Cancel queued messages (by id): they are never sent; the timeline says the CLI asked. Exits 1 if any id is
    unknown or not queued, naming its status (the others are cancelled all the same)."""
    from . import outbox
    results = outbox.cancel(_engine(_settings()), list(ids), actor="cli")
    problems = []
    for notification_id in dict.fromkeys(ids):
        if notification_id not in results:
            problems.append(f"{notification_id}: no such message")
        elif results[notification_id][1]:
            click.echo(_tsv([notification_id, "cancelled"]))
        else:
            problems.append(f"{notification_id}: is {results[notification_id][0]}, only queued messages can be "
                            "cancelled")
    if problems:
        raise click.ClickException("not cancelled: " + "; ".join(problems))


@main.command()
@click.option("--days", default=30, show_default=True, type=click.IntRange(1),
              help="Keep finished messages this long (webhook dedup keys: at least 8 days).")
@click.option("--dead-days", type=click.IntRange(1),
              help="Also delete dead messages and dead webhook events older than this (default: keep the "
                   "dead-letter queue; dead webhook events at least 8 days).")
@click.option("--batch-size", default=1000, show_default=True, type=click.IntRange(1, 50_000),
              help="Rows per batch; each batch is its own short transaction.")
@click.option("--json", "as_json", is_flag=True, help="The summary as one JSON object.")
def prune(days: int, dead_days: int | None, batch_size: int, as_json: bool) -> None:
    """Delete finished messages (with their timelines) and processed webhooks past the retention, in small batches.

    Safe while workers run: only final states go, rows in use are skipped, each batch commits on its own. Stopped
    anywhere, the next run carries on. Run it daily from a scheduler."""
    from . import outbox
    progress = _PruneProgress()
    result = outbox.PruneResult()
    try:
        outbox.prune(_engine(_settings()), days=days, dead_days=dead_days, batch_size=batch_size,
                     progress=progress, result=result)
    except KeyboardInterrupt:
        progress.finish()
        _prune_summary(result, as_json, interrupted=True)
        error = CliError("interrupted: the batches done are committed; run prune again to carry on")
        error.exit_code = 130
        raise error from None
    progress.finish()
    _prune_summary(result, as_json, interrupted=False)


def _prune_summary(result, as_json: bool, *, interrupted: bool) -> None:
    if as_json:
        click.echo(_json.dumps({"messages": result.messages, "events": result.events,
                                "webhook_events": result.webhook_events, "batches": result.batches,
                                "seconds": round(result.seconds, 3),
                                "longest_batch_ms": round(result.longest_batch_seconds * 1000, 1),
                                "complete": not interrupted}))
    else:
        click.echo(f"pruned {result.messages} messages ({result.events} timeline events) and "
                   f"{result.webhook_events} webhook events in {result.batches} batches, {result.seconds:.1f} s "
                   f"(longest batch {result.longest_batch_seconds * 1000:.0f} ms)")


class _PruneProgress:
    """Prune progress on stderr: one line redrawn in place on a terminal, a plain line every 10 s otherwise (a
    scheduler's log)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty()
        self.drawn = False
        self.next_at = time.monotonic() + (0.1 if self.tty else 10.0)

    def __call__(self, result) -> None:
        now = time.monotonic()
        if now < self.next_at:
            return
        self.next_at = now + (0.1 if self.tty else 10.0)
        line = (f"{result.phase.replace('_', ' ')} {result.fraction:4.0%}  {result.messages:,} messages, "
                f"{result.events:,} events, {result.webhook_events:,} webhook events  "
                f"{result.rows / max(result.seconds, 1e-6):,.0f} rows/s")
        if self.tty:
            click.echo(f"\r{line}\033[K", err=True, nl=False)
            self.drawn = True
        else:
            click.echo(f"prune: {line}", err=True)

    def finish(self) -> None:
        if self.drawn:
            click.echo("", err=True)


# --- campaigns ------------------------------------------------------------------------------------------------------

@main.group()
def campaign() -> None:
    """Campaigns: named sets of messages imported from CSV and steered as one."""


class _Progress:
    """Import progress on stderr: a bar redrawn in place on a terminal, a plain line per tenth otherwise."""

    def __init__(self, total: int):
        self.total, self.done, self.started = total, 0, time.monotonic()
        self.tty = sys.stderr.isatty()
        self._next_line = 0

    def __call__(self, rows: int) -> None:
        self.done += rows
        rate = self.done / max(time.monotonic() - self.started, 1e-6)
        if self.tty:
            width = 30
            filled = int(width * self.done / max(self.total, 1))
            click.echo(f"\r[{'#' * filled}{'.' * (width - filled)}] {self.done:,}/{self.total:,} rows  "
                       f"{rate:,.0f} rows/s", err=True, nl=self.done >= self.total)
        elif self.done >= self._next_line or self.done >= self.total:
            click.echo(f"imported {self.done:,}/{self.total:,} rows ({rate:,.0f} rows/s)", err=True)
            self._next_line = self.done + max(1, self.total // 10)


def _campaign_error(exc) -> CliError:
    return CliError(str(exc))


@campaign.command("import")
@click.argument("csv_file", type=click.Path(exists=True, dir_okay=False, allow_dash=True))
@click.option("--name", required=True, help="The campaign (created on first import, found by name after).")
@click.option("--template", help="Template name (unless the CSV has a `message` column).")
@click.option("--lang", help="Template language code, e.g. en_US.")
@click.option("--phone-number-id", help="Sender (default: the campaign's, else WHATSAPP_PHONE_NUMBER_ID).")
@click.option("--skip-invalid", is_flag=True, help="Import the valid rows and list the others (default: write "
                                                   "nothing if any row is invalid).")
def campaign_import(csv_file, name, template, lang, phone_number_id, skip_invalid) -> None:
    """Queue one message per CSV row (columns: to, body.1 … or body.<name>, header.1, header.image, or message).

    Every row is validated first; with an invalid row nothing is written (exit 1) unless --skip-invalid. Importing
    the same file again queues nothing new."""
    from . import campaigns
    from .messages import InvalidMessage, validate_phone_number_id
    try:
        campaigns.validate_name(name)
        validate_phone_number_id(phone_number_id)
    except (campaigns.CampaignError, InvalidMessage) as exc:
        raise click.BadParameter(str(exc)) from None
    if (template is None) != (lang is None):
        raise click.UsageError("--template and --lang go together")
    with click.open_file(csv_file, "rb") as handle:
        data = handle.read()
    try:
        read = campaigns.read_csv(campaigns.read_lines(data), name=name, template=template, lang=lang)
    except campaigns.InvalidCsv as exc:
        raise CliError(f"{csv_file}: {exc}") from None
    for problem in read.problems:
        click.echo(f"{csv_file}:{problem.line}: {problem.reason}", err=True)
    if read.problems and not skip_invalid:
        raise CliError(f"{len(read.problems)} invalid row(s) of {read.rows}: nothing imported "
                       "(fix them, or --skip-invalid to import the others)")
    settings = _settings()
    sender = phone_number_id or None
    progress = _Progress(len(read.items))
    started = time.monotonic()
    try:
        result = campaigns.import_items(_engine(settings), name=name, phone_number_id=sender, items=read.items,
                                        default_sender=settings.phone_number_id, progress=progress)
    except campaigns.CampaignError as exc:
        raise _campaign_error(exc) from None
    elapsed = time.monotonic() - started
    parked = " (the campaign is paused: they wait for `campaign resume`)" if result.status == "paused" else ""
    click.echo(f"campaign {name}: {result.imported} imported, {result.present + read.duplicates} already present, "
               f"{len(read.problems)} invalid{parked}")
    if read.items:
        click.echo(f"({len(read.items):,} rows written in {elapsed:.1f} s, "
                   f"{len(read.items) / max(elapsed, 1e-6):,.0f} rows/s)", err=True)


def _print_campaign(c: dict) -> None:
    counts = ", ".join(f"{k} {v}" for k, v in sorted(c["counts"].items())) or "no messages"
    click.echo(f"campaign {c['name']}: {c['status']}" + (f" ({c['pause_reason']})" if c["pause_reason"] else ""))
    click.echo(f"  sender {c['phone_number_id']}, {c['total']} messages: {counts}")
    achieved = c["sent_per_second_last_minute"]
    click.echo(f"  rate: the sender's {c['rate_mps']:g} messages/s (shared; transactional messages first)"
               + (f", {achieved:g}/s sent over the last minute" if achieved else ""))
    click.echo(f"  created {c['created_at']:%Y-%m-%d %H:%M:%S}, started sending "
               + (f"{c['started_at']:%Y-%m-%d %H:%M:%S}" if c["started_at"] else "-"))
    if c["expected_end_at"]:
        click.echo(f"  expected end {c['expected_end_at']:%Y-%m-%d %H:%M:%S} UTC at the earliest "
                   f"({c['waiting']} waiting)")
    elif c["status"] == "paused":
        click.echo(f"  {c['waiting']} waiting for `wa-outbox campaign resume {c['name']}`")


@campaign.command("list")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per campaign.")
def campaign_list(as_json: bool) -> None:
    """Every campaign with its messages counted by status."""
    from . import campaigns
    settings = _settings()
    rows = campaigns.summaries(_engine(settings), default_mps=settings.rate_limit_mps)
    if as_json:
        for row in rows:
            click.echo(_json.dumps(row, default=_json_default, ensure_ascii=False))
        return
    statuses = ("queued", "sent", "delivered", "read", "failed", "dead", "cancelled")
    click.echo(_tsv(["name", "status", "sender", "total", *statuses]))
    for r in rows:
        click.echo(_tsv([r["name"], r["status"], r["phone_number_id"], r["total"],
                         *(r["counts"].get(s, 0) for s in statuses)]))


@campaign.command("show")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="As one JSON object.")
def campaign_show(name: str, as_json: bool) -> None:
    """A campaign: counts by status, the rate, when it started and when it should end."""
    from . import campaigns
    settings = _settings()
    try:
        found = campaigns.get(_engine(settings), name, default_mps=settings.rate_limit_mps)
    except campaigns.CampaignError as exc:
        raise _campaign_error(exc) from None
    if as_json:
        click.echo(_json.dumps(found, default=_json_default, ensure_ascii=False))
    else:
        _print_campaign(found)


def _steer(name: str, action: str, **kwargs) -> dict:
    from . import campaigns
    try:
        return getattr(campaigns, action)(_engine(_settings()), name, actor="cli", **kwargs)
    except campaigns.CampaignError as exc:
        raise _campaign_error(exc) from None


@campaign.command("pause")
@click.argument("name")
@click.option("--reason", help="Shown with the campaign (default: paused by cli).")
def campaign_pause(name: str, reason: str | None) -> None:
    """Stop claiming the campaign's messages now; in-flight sends finish, retries wait. Nothing is lost."""
    r = _steer(name, "pause", reason=reason)
    click.echo(f"campaign {name}: paused, {r['moved']} messages parked")


@campaign.command("resume")
@click.argument("name")
def campaign_resume(name: str) -> None:
    """Let the campaign's messages go again, attempts as they were."""
    r = _steer(name, "resume")
    click.echo(f"campaign {name}: active, {r['moved']} messages due again")


@campaign.command("cancel")
@click.argument("name")
def campaign_cancel(name: str) -> None:
    """Cancel every still-queued message of the campaign (each gets a timeline event); no more imports into it."""
    r = _steer(name, "cancel")
    click.echo(f"campaign {name}: cancelled, {r['moved']} queued messages cancelled")


def _gunicorn_command() -> list[str]:
    # The app by its module path, not the checkout's wsgi.py: the same from a wheel as from a checkout.
    return [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wa_outbox.web.wsgi:app"]


# honcho's colours: each process's lines start with its name in its own colour.
_PREFIX_COLOURS = ("\033[36m", "\033[33m", "\033[32m", "\033[35m", "\033[34m")


def _run_children(commands: dict[str, list[str]], *, grace: float = 28.0, stop_signal: int = signal.SIGTERM,
                  prefixed: bool = False) -> int:
    """Run child processes until one exits or we are told to stop (SIGINT, SIGTERM); then stop them all.

    Each child leads its own process group, so Ctrl-C reaches only this process, which sends `stop_signal` to every
    child's whole group (gunicorn's workers included) and SIGKILLs the groups still there after `grace` seconds.
    With `prefixed`, each output line is shown as `name | line` (coloured on a terminal), as honcho does."""
    pipe = subprocess.PIPE if prefixed else None
    children = {name: subprocess.Popen(cmd, start_new_session=True, stdout=pipe,
                                       stderr=subprocess.STDOUT if prefixed else None, preexec_fn=_die_with_parent)
                for name, cmd in commands.items()}
    pumps = [threading.Thread(target=_pump, args=(proc, _prefix(name, i, commands)), daemon=True)
             for i, (name, proc) in enumerate(children.items())] if prefixed else []
    for pump in pumps:
        pump.start()
    stopping = False

    def _stop(signum, frame):
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    status = 0
    while not stopping:
        exited = [(n, p.returncode) for n, p in children.items() if p.poll() is not None]
        if exited:
            name, status = exited[0]
            click.echo(f"wa-outbox: {name} exited with status {status}", err=True)
            break
        time.sleep(0.2)
    for proc in children.values():
        _signal_group(proc, stop_signal)
    deadline = time.monotonic() + grace
    for name, proc in children.items():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            click.echo(f"wa-outbox: {name} still running after {grace:g} s: killed", err=True)
            _signal_group(proc, signal.SIGKILL)
            proc.wait()
        _signal_group(proc, signal.SIGKILL)  # anything its group left behind (a stuck gunicorn worker)
    for pump in pumps:
        pump.join(timeout=2)
    return status


def _signal_group(proc: subprocess.Popen, signum: int) -> None:
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _die_with_parent() -> None:
    """In the child, before exec: on Linux, get SIGTERM should this process die without stopping its children."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _prefix(name: str, index: int, commands: dict) -> str:
    width = max(len(n) for n in commands)
    label = f"{name:<{width}} |"
    if sys.stdout.isatty():
        return f"{_PREFIX_COLOURS[index % len(_PREFIX_COLOURS)]}{label}\033[0m "
    return f"{label} "


def _pump(proc: subprocess.Popen, prefix: str) -> None:
    for raw in iter(proc.stdout.readline, b""):
        line = raw.decode("utf-8", "replace").rstrip("\n")
        sys.stdout.write(f"{prefix}{line}\n")
        sys.stdout.flush()


@main.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []}, add_help_option=False)
@click.pass_context
def simulator(ctx: click.Context) -> None:
    """Run the Graph API simulator: a fake WhatsApp Cloud API with fault injection and signed status webhooks."""
    # Imported on use: the simulator needs the `simulator` extra (jsonschema), production installs do not.
    try:
        from .simulator.cli import simulator_command
    except ImportError as exc:
        raise click.ClickException(f"the simulator needs pip install 'wa-outbox[simulator]' ({exc})") from None
    simulator_command.main(args=ctx.args, prog_name="wa-outbox simulator", standalone_mode=True)


if __name__ == "__main__":
    main()
