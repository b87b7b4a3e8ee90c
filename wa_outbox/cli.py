"""The `wa-outbox` command line.

Every command reads the same environment as the services. Without DATABASE_URL the commands start (or reuse) the
embedded Postgres in ./.wa-outbox/ (WA_OUTBOX_DATA_DIR), so a laptop needs nothing installed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import click

from . import logs
from .config import ConfigError, Settings
from .db import with_database

# Local-only values `wa-outbox dev` uses for whatever is unset: never for production.
DEV_DEFAULTS = {
    "WHATSAPP_APP_SECRET": "dev-app-secret",
    "WHATSAPP_VERIFY_TOKEN": "dev-verify-token",
    "WHATSAPP_ACCESS_TOKEN": "dev-access-token",
    "WHATSAPP_PHONE_NUMBER_ID": "100000000000001",
    "WA_OUTBOX_API_TOKENS": "dev-api-token-0123456789",
}


def _settings() -> Settings:
    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from None
    logs.configure(settings.log_level)
    try:
        return with_database(settings)
    except ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from None


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """wa-outbox: reliable WhatsApp Cloud API messaging with Postgres as the only moving part."""


# --- database -------------------------------------------------------------------------------------------------------

@main.group()
def db() -> None:
    """Schema migrations (alembic)."""


@db.command("upgrade")
@click.option("--revision", default="head", show_default=True)
def db_upgrade(revision: str) -> None:
    """Apply migrations (the Procfile's release phase)."""
    from . import migrate
    settings = _settings()
    migrate.upgrade(settings.database_url, revision)
    _record_default_sender(settings)
    click.echo(f"wa-outbox: schema at {revision}")


@db.command("downgrade")
@click.argument("revision")
def db_downgrade(revision: str) -> None:
    """Revert migrations down to REVISION (`base` removes every wa-outbox table)."""
    from . import migrate
    migrate.downgrade(_settings().database_url, revision)
    click.echo(f"wa-outbox: schema at {revision}")


@db.command("current")
def db_current() -> None:
    """Show the applied revision."""
    from . import migrate
    migrate.current(_settings().database_url)


@db.command("query")
@click.argument("sql")
def db_query(sql: str) -> None:
    """Run one SQL statement and print its rows, tab-separated (support queries on the embedded database)."""
    import psycopg
    with psycopg.connect(_settings().database_url, autocommit=True) as conn:
        try:
            cursor = conn.execute(sql.encode())  # bytes: run as written, no placeholder parsing
        except psycopg.Error as exc:
            raise click.ClickException(str(exc).strip()) from None
        if cursor.description:
            click.echo("\t".join(c.name for c in cursor.description))
            for row in cursor:
                click.echo("\t".join("" if v is None else str(v) for v in row))


def _record_default_sender(settings: Settings) -> None:
    """Tell SQL-side enqueue() which sender to use when the caller names none."""
    if not settings.phone_number_id:
        return
    import psycopg
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO wa_outbox.settings (key, value) VALUES ('default_phone_number_id', %s) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value, updated_at = now()",
            (settings.phone_number_id,))


# --- processes ------------------------------------------------------------------------------------------------------

@main.command()
@click.option("--port", type=int, help="Port to listen on (default $PORT or 8000).")
def web(port: int | None) -> None:
    """Serve the web app with gunicorn (webhooks, /v1 API, health, metrics)."""
    settings = _settings()
    if port:
        os.environ["PORT"] = str(port)
    try:
        settings.require_web()
    except ConfigError as exc:
        raise click.ClickException(f"configuration error: {exc}") from None
    sys.exit(_run_children({"web": _gunicorn_command()}))


@main.command()
@click.option("--port", type=int, default=8000, show_default=True, help="Port of the web app.")
def dev(port: int) -> None:
    """Everything on this machine: embedded Postgres (unless DATABASE_URL), migrations, web app."""
    for name, value in DEV_DEFAULTS.items():
        os.environ.setdefault(name, value)
    os.environ["PORT"] = str(port)
    settings = _settings()
    from . import migrate
    migrate.upgrade(settings.database_url)
    _record_default_sender(settings)
    base = f"http://127.0.0.1:{port}"
    click.echo(f"wa-outbox dev: postgres  {_redact(settings.database_url)}")
    click.echo(f"wa-outbox dev: web       {base}  (webhooks: {base}/webhooks/whatsapp, metrics: {base}/metrics)")
    click.echo(f"wa-outbox dev: app secret {os.environ['WHATSAPP_APP_SECRET']!r}, "
               f"verify token {os.environ['WHATSAPP_VERIFY_TOKEN']!r}")
    click.echo("wa-outbox dev: Ctrl-C stops everything")
    sys.exit(_run_children({"web": _gunicorn_command()}))


def _gunicorn_command() -> list[str]:
    return [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wsgi:app",
            "--chdir", os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]


def _run_children(commands: dict[str, list[str]]) -> int:
    """Run child processes until one exits or we are told to stop; then stop them all (SIGTERM, then SIGKILL)."""
    children = {name: subprocess.Popen(cmd) for name, cmd in commands.items()}
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
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 28
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return status


def _redact(url: str) -> str:
    scheme, _, rest = url.partition("://")
    userinfo, at, host = rest.rpartition("@")
    if at and ":" in userinfo:
        userinfo = userinfo.split(":", 1)[0] + ":***"
    return f"{scheme}://{userinfo}{at}{host}"


if __name__ == "__main__":
    main()
