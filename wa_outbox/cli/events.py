"""`wa-outbox events`: the events for apps, read from the feed (`tail`) or received as an endpoint (`listen`)."""

from __future__ import annotations

import click


@click.group()
def events() -> None:
    """Events for apps: read the feed, or receive deliveries as an endpoint would."""


@events.command("listen")
@click.option("--port", type=click.IntRange(1, 65535), required=True, help="The port to listen on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="The address to listen on.")
@click.option("--secret", metavar="whsec_…",
              help="Verify with this endpoint secret. Without it, an endpoint for http://HOST:PORT/ is registered "
                   "(or reused) and its secret used (needs WA_OUTBOX_ENDPOINTS_ALLOW_PRIVATE and "
                   "WA_OUTBOX_SECRET_KEY).")
@click.option("--json", "as_json", is_flag=True, help="Each event as one line of JSON (the envelope as delivered).")
def listen(port: int, host: str, secret: str | None, as_json: bool) -> None:
    """A receiver for development: verify each delivery with the Standard Webhooks library and print it, one line per
    event; a delivery that does not verify is answered 401. Ctrl-C stops it."""
    import json
    import signal
    import sys

    from ..endpoints import is_secret
    from ..listener import ListenServer, line
    from ._errors import CliError

    def emit(event) -> None:
        click.echo(json.dumps(event, ensure_ascii=False) if as_json else line(event))
        sys.stdout.flush()

    if secret is not None and not is_secret(secret):
        raise CliError("--secret is an endpoint's secret: whsec_ followed by base64 (as `endpoints add` printed it)")
    try:
        server = ListenServer((host, port), emit)  # bound first: a port in use is said before anything is registered
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    with server:
        if secret is None:
            server.webhook = _register_listener(host, port)
        else:
            server.webhook = _webhook(secret)
        click.echo(f"listening on http://{host}:{port}/ (Ctrl-C stops)", err=True)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass


def _webhook(secret: str):
    from standardwebhooks import Webhook
    return Webhook(secret)


def _register_listener(host: str, port: int):
    """The endpoint for this address, registered or reused; its id is printed, never its secret."""
    from .. import endpoints
    from ..config import ConfigError
    from ._common import _engine, _settings
    from ._errors import CliError, ConfigurationError
    settings = _settings()
    url = f"http://{'[' + host + ']' if ':' in host else host}:{port}/"
    try:
        found = endpoints.listener(_engine(settings), settings, url)
    except endpoints.EndpointError as exc:
        raise CliError(str(exc)) from None
    except ConfigError as exc:
        raise ConfigurationError(exc) from None
    click.echo(f"endpoint {found.endpoint_id} "
               + ("registered" if found.created else "enabled again" if found.enabled else "reused")
               + f" for {url}", err=True)
    return _webhook(found.secret)
