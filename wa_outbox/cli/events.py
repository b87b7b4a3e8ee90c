"""`wa-outbox events`: the events for apps, read from the feed (`tail`) or received as an endpoint (`listen`)."""

from __future__ import annotations

import json as _json
from typing import Any

import click

from ._common import _engine, _settings
from ._errors import CliError


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
    import sys

    from ..endpoints import is_secret
    from ..listener import ListenServer, line
    from ..stop_signals import on_stop_signal
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
        # SIGTERM or Ctrl-C, through stop_signals as every wa-outbox process takes them: serve_forever returns at its
        # next poll. (shutdown() waits for that, so it must run on another thread: stop_signals' own.)
        on_stop_signal(lambda signum: server.shutdown())
        server.serve_forever(poll_interval=0.2)


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
@events.command()
@click.option("--after", metavar="CURSOR", help="Start after this cursor (default: the oldest event kept).")
@click.option("--types", metavar="TYPE,…", help="Only these event types (comma-separated).")
@click.option("--follow", "-f", is_flag=True, help="Keep waiting for new events (Ctrl-C ends).")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line: the envelope and its cursor.")
def tail(after: str | None, types: str | None, follow: bool, as_json: bool) -> None:
    """Print the events feed, oldest first: each event once, in order (the same as GET /v1/events).

    Without --follow, stops at the newest readable event and prints its cursor on stderr (pass it to --after to
    carry on from there)."""
    from .. import events as feed
    from ..event_notices import EventNotices
    settings = _settings()
    engine = _engine(settings)
    notices = EventNotices(settings) if follow else None
    try:
        wanted = feed.parse_types(types)
        cursor = after
        while True:
            page = feed.read_feed(engine, after=cursor, limit=feed.MAX_LIMIT, types=wanted,
                                  wait=feed.MAX_WAIT_SECONDS if follow else 0, notices=notices)
            for envelope, event_cursor in zip(page.data, page.cursors, strict=True):
                click.echo(_json.dumps({"cursor": event_cursor, **envelope}, ensure_ascii=False) if as_json
                           else _line(envelope, event_cursor))
            cursor = page.next_cursor
            if not page.has_more and not follow:
                break
    except feed.FeedError as exc:
        raise CliError(str(exc)) from None
    except feed.CursorPruned as exc:
        raise CliError(str(exc)) from None
    except KeyboardInterrupt:
        raise CliError(f"interrupted; carry on with --after {cursor}" if cursor else "interrupted",
                       exit_code=130) from None
    if not as_json and cursor:
        click.echo(f"next cursor: {cursor}", err=True)


def _line(envelope: dict[str, Any], cursor: str) -> str:
    """A human line: when, the id, the type, what it says."""
    from ..events import summary
    return f"{envelope['timestamp']}  {envelope['id']}  {envelope['type']}  {summary(envelope)}  [{cursor}]"
