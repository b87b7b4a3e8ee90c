"""The processes: `wa-outbox web`, `worker`, `dev` (everything on this machine) and `simulator`."""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

import click

from ..config import DEV_API_TOKEN, ConfigError, redact_url
from ..stop_signals import on_stop_signal, stop_event
from ._common import _record_default_sender, _settings
from ._errors import ConfigurationError
from ._supervisor import _run_children

# Local-only values `wa-outbox dev` uses for whatever is unset: never for production.
DEV_DEFAULTS = {
    "WHATSAPP_APP_SECRET": "dev-app-secret",
    "WHATSAPP_VERIFY_TOKEN": "dev-verify-token",
    "WHATSAPP_ACCESS_TOKEN": "dev-access-token",
    "WHATSAPP_PHONE_NUMBER_ID": "100000000000001",
    "WA_OUTBOX_API_TOKENS": DEV_API_TOKEN,
}


@click.command()
@click.option("--port", type=int, help="Port to listen on (default $PORT or 8000).")
def web(port: int | None) -> None:
    """Serve the web app with gunicorn (webhooks, /v1 API, health, metrics)."""
    settings = _settings(service=True)
    if port:
        os.environ["PORT"] = str(port)
    try:
        settings.require_web(apps_registered=True)  # and gunicorn's master checks that an app is, without the secret
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    sys.exit(_run_children({"web": _gunicorn_command()}))


@click.command()
def worker() -> None:
    """Deliver queued messages and process stored webhooks until SIGTERM (then drain within the grace).

    A database that cannot be reached, or is not migrated yet (the release phase still running), is waited for with
    capped exponential backoff, one log line per attempt; SIGTERM or SIGINT while waiting exits 0 at once."""
    from ..worker import Worker, wait_until_ready
    from ..worker._priority import lower_priority
    settings = _settings(service=True)
    try:  # all but the credentials, which may be registered senders: asked once the database answers
        settings.require_worker(senders_registered=True)
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    lower_priority(settings.worker_nice)  # before any thread starts: the threads inherit it
    stopping = threading.Event()
    running: list[Worker] = []

    def _stop(signum: int) -> None:  # on the "signals" thread: the main thread may hold the Events stop() sets
        stopping.set()
        for started in running:
            started.stop()

    on_stop_signal(_stop)
    if not wait_until_ready(settings, stopping, prepare=lambda: _record_default_sender(settings)):
        return
    try:
        the_worker = Worker(settings)
        the_worker.require_credentials()
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    running.append(the_worker)
    if stopping.is_set():
        return
    the_worker.run()


@click.command()
@click.option("--port", type=int, default=8000, show_default=True, help="Port of the web app.")
@click.option("--simulator-port", type=int, default=9000, show_default=True, help="Port of the Graph API simulator.")
@click.option("--status-delay-ms", type=click.FloatRange(min=0), default=200, show_default=True,
              help="Simulator: sent after N ms, delivered after 2N, read after 3N.")
def dev(port: int, simulator_port: int, status_delay_ms: float) -> None:
    """Everything on this machine: Postgres, migrations, web app, worker, and the Graph API simulator in place of
    Meta (unless WHATSAPP_API_BASE_URL is set), wired together. Ctrl-C stops it all.

    Prints the development API token it generates, never a WA_OUTBOX_API_TOKENS you set (its curls then read
    $TOKEN); with the embedded Postgres, the DATABASE_URL another program connects with."""
    # A token the user set is theirs (it may be a real deployment's): never printed. The generated one is shown, as the
    # only way into the API and the ops page.
    own_token = bool(os.environ.get("WA_OUTBOX_API_TOKENS", "").strip())
    embedded = not os.environ.get("DATABASE_URL", "").strip()
    for name, value in DEV_DEFAULTS.items():
        if not os.environ.get(name, "").strip():
            os.environ[name] = value
    os.environ["PORT"] = str(port)
    os.environ["WA_OUTBOX_BIND"] = f"127.0.0.1:{port}"
    os.environ.setdefault("WA_OUTBOX_POLL_INTERVAL", "0.5")
    os.environ.setdefault("WA_OUTBOX_SHUTDOWN_GRACE", "3")  # Ctrl-C stops everything within a few seconds
    # One readable line per event, prefixed per process (the children write to a pipe: tell them it is for people).
    os.environ.setdefault("LOG_FORMAT", "console")
    os.environ["PYTHONUNBUFFERED"] = "1"
    os.environ["WA_OUTBOX_DEV"] = "true"  # the ops login page's hint: which token logs in (ops_views.dev_login_hint)
    # Endpoints work out of the box: a receiver on this machine (`events listen`) may be one, and their secrets are
    # stored under a development key made once and kept in the data dir (never printed).
    os.environ.setdefault("WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE", "true")
    key_file = None
    if not os.environ.get("WA_OUTBOX_SECRET_KEY", "").strip():
        key_file = dev_secret_key_file(os.environ.get("WA_OUTBOX_DATA_DIR", "").strip() or ".wa-outbox")
        os.environ["WA_OUTBOX_SECRET_KEY"] = key_file.read_text(encoding="ascii").strip()
    simulate = "WHATSAPP_API_BASE_URL" not in os.environ
    sim_url = f"http://127.0.0.1:{simulator_port}"
    if simulate:
        os.environ["WHATSAPP_API_BASE_URL"] = f"{sim_url}/v23.0"
    settings = _settings()
    from .. import migrate
    migrate.upgrade(settings.required("database_url"), prepared_statements=settings.db_prepared_statements)
    _record_default_sender(settings)

    web_url = f"http://127.0.0.1:{port}"
    children = {"web": _gunicorn_command(), "worker": [sys.executable, "-m", "wa_outbox.cli", "worker"]}
    if simulate:
        children["sim"] = [sys.executable, "-m", "wa_outbox.cli", "simulator", "--port", str(simulator_port),
                                 "--webhook-url", f"{web_url}/webhooks/whatsapp",
                                 "--status-delay-ms", str(status_delay_ms)]
    if own_token:
        auth = "-H \"Authorization: Bearer $TOKEN\""
        token_shown = "yours: one of WA_OUTBOX_API_TOKENS, not shown; TOKEN=<it> for the curls below"
    else:
        auth = f"-H 'Authorization: Bearer {settings.api_tokens[0]}'"
        token_shown = settings.api_tokens[0]
    database_url = settings.required("database_url")
    click.echo(f"wa-outbox dev: postgres   {redact_url(database_url)}")
    if embedded:  # no password (the server trusts its local socket): the URL works as printed
        click.echo(f"wa-outbox dev:            another app connects with DATABASE_URL='{database_url}' "
                   "(a Unix socket, no password: psql, libpq, psycopg, node-postgres take it as it is)")
    click.echo(f"wa-outbox dev: web        {web_url}  (webhooks {web_url}/webhooks/whatsapp, "
               f"metrics {web_url}/metrics, API token {token_shown})")
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
    key = f"$(cat {key_file})" if key_file else "<your WA_OUTBOX_SECRET_KEY>"
    click.echo("wa-outbox dev: hear the events — in another terminal, a receiver that registers itself and prints "
               "each verified delivery:")
    click.echo(f"  WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE=true WA_OUTBOX_SECRET_KEY={key} "
               f"wa-outbox events listen --port {port + 100}")
    stop = stop_event()  # from the banner on, Ctrl-C stops the children (never half-started)
    click.echo("wa-outbox dev: Ctrl-C stops everything")
    sys.stdout.flush()
    sys.exit(_run_children(children, grace=5.0, stop_signal=signal.SIGINT, prefixed=True, stop=stop))


DEV_SECRET_KEY_FILE = "dev-secret-key"


def dev_secret_key_file(data_dir: str) -> Path:
    """`<data_dir>/dev-secret-key`: a Fernet key for WA_OUTBOX_SECRET_KEY under `wa-outbox dev`, made on first use
    (readable by its owner only) and the same every run after, so the secrets stored under it stay readable."""
    from ..secret_box import generate_key
    path = Path(data_dir) / DEV_SECRET_KEY_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another `dev` made it meanwhile: use that one
            return path
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(generate_key() + "\n")
    return path


def _gunicorn_command() -> list[str]:
    # The app by its module path, not the checkout's wsgi.py: the same from a wheel as from a checkout.
    return [sys.executable, "-m", "gunicorn", "--config", "python:wa_outbox.gunicorn_conf", "wa_outbox.web.wsgi:app"]


@click.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True,
                                "help_option_names": []}, add_help_option=False)
@click.pass_context
def simulator(ctx: click.Context) -> None:
    """Run the Graph API simulator: a fake WhatsApp Cloud API with fault injection and signed status webhooks."""
    # Imported on use: the simulator needs the `simulator` extra (jsonschema), production installs do not.
    try:
        from ..simulator.cli import simulator_command
    except ImportError as exc:
        raise click.ClickException(f"the simulator needs pip install 'wa-outbox[simulator]' ({exc})") from None
    simulator_command.main(args=ctx.args, prog_name="wa-outbox simulator", standalone_mode=True)
