"""`wa-outbox simulator`: the fake Cloud API as a process of its own, for `wa-outbox dev` and manual testing.

Register it with `main.add_command(simulator_command)`. Point the service at it with
`WHATSAPP_API_BASE_URL=<the base URL it prints>`; it checks the same `WHATSAPP_ACCESS_TOKEN` and signs webhooks with
the same `WHATSAPP_APP_SECRET` (development defaults when unset). The admin endpoints (`/_admin/…`) have no
authentication: keep the default host, 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any

import click

from .. import logs
from ..stop_signals import stop_event
from .server import SimulatorServer

DEV_ACCESS_TOKEN = "dev-access-token"
DEV_APP_SECRET = "dev-app-secret"


def _fault_rule(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> list[dict]:
    rules = []
    for value in values:
        try:
            rules.append(json.loads(value))
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}: {value}") from None
    return rules


@click.command("simulator")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Interface to listen on. The admin endpoints have no authentication: keep it local.")
@click.option("--port", type=int, default=9000, show_default=True, help="Port to listen on (0: any free port).")
@click.option("--webhook-url", metavar="URL",
              help="Where to POST signed status and inbound webhooks, e.g. http://127.0.0.1:8000/webhooks/whatsapp.")
@click.option("--status-delay-ms", type=click.FloatRange(min=0), default=500, show_default=True,
              help="Time between status webhooks: sent after N ms, delivered after 2N, read after 3N.")
@click.option("--fault", "faults", multiple=True, metavar="JSON", callback=_fault_rule,
              help='A fault rule, e.g. \'{"mode": "error", "code": 131000, "rate": 0.1}\'. Repeatable.')
@click.option("--mps", type=click.FloatRange(min=0, min_open=True),
              help="Messages per second per sender number above which sends get error 130429.")
@click.option("--accounts", "accounts_file", type=click.File("r"), metavar="FILE",
              help='Many numbers and apps, as JSON: {"apps": {"APP_ID": {"secret": "…"}}, "numbers": '
                   '{"PHONE_NUMBER_ID": {"token": "…", "app": "APP_ID", "waba": "WABA_ID"}}} (a file: tokens stay '
                   'off the command line). Each such number accepts only its own token.')
def simulator_command(host: str, port: int, webhook_url: str | None, status_delay_ms: float, faults: list[dict],
                      mps: float | None, accounts_file: Any = None) -> None:
    """Run the Graph API simulator: a fake WhatsApp Cloud API with fault injection and signed status webhooks.

    \b
    From the environment (the same variables as the service, so the two agree):
      WHATSAPP_ACCESS_TOKEN     the bearer token it accepts (default dev-access-token)
      WHATSAPP_APP_SECRET       the secret it signs webhooks with (default dev-app-secret)
      WHATSAPP_PHONE_NUMBER_ID  its sender number id, when set
    """
    if not logging.getLogger().handlers:
        logs.configure(os.environ.get("LOG_LEVEL", "INFO"), os.environ.get("LOG_FORMAT") or None)
    options: dict[str, Any] = {"status_delays_ms": (status_delay_ms, 2 * status_delay_ms, 3 * status_delay_ms),
                               "mps": mps}
    if os.environ.get("WHATSAPP_PHONE_NUMBER_ID"):
        options["phone_number_id"] = os.environ["WHATSAPP_PHONE_NUMBER_ID"]
    if accounts_file is not None:
        try:
            accounts = json.load(accounts_file)
        except json.JSONDecodeError as exc:
            raise click.BadParameter(f"not JSON: {exc}", param_hint="--accounts") from None
        if not isinstance(accounts, dict) or set(accounts) - {"apps", "numbers", "messaging_limit", "portfolios"}:
            raise click.BadParameter('expected {"apps": {…}, "numbers": {…}, "messaging_limit"?: N, '
                                     '"portfolios"?: {"ID": {"wabas": […], "messaging_limit"?: N}}}',
                                     param_hint="--accounts")
        options.update(accounts)
    try:
        server = SimulatorServer(
            access_token=os.environ.get("WHATSAPP_ACCESS_TOKEN") or DEV_ACCESS_TOKEN,
            app_secret=os.environ.get("WHATSAPP_APP_SECRET") or DEV_APP_SECRET,
            webhook_url=webhook_url, faults=faults, host=host, port=port, **options)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None

    stop = stop_event()
    try:
        server.start()
    except OSError as exc:
        raise click.ClickException(f"cannot listen on {host}:{port}: {exc}") from None
    click.echo(f"wa-outbox simulator: listening on {server.base_url} (admin: {server.admin_url})")
    while not stop.wait(0.5):
        pass
    server.stop()
    click.echo("wa-outbox simulator: stopped")
